import sys

from suite.machine import compile_cache  # NB: imports nothing heavy

# its workers' fork server imports torch beside this process's own imports; NB: not where --compile-cache
# is given, whose variables the server must inherit (set once the command line is parsed)
if sys.argv[1:2] == ["run"] and not compile_cache.named(sys.argv[2:]):
    from suite.run.executors import forks

    forks.start_early()

from suite.cli import main  # noqa: E402

sys.exit(main())
