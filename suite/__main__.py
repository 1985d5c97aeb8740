import sys

from suite.cli import main

sys.exit(main())
