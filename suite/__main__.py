import sys

if sys.argv[1:2] == ["run"]:  # its workers' fork server imports torch beside this process's own imports
    from suite.run.executors import forks

    forks.start_early()

from suite.cli import main  # noqa: E402

sys.exit(main())
