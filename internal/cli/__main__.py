import sys

from internal.cli.main import main

sys.exit(main())
