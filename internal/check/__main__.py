import sys

from internal.check.service import main

sys.exit(main())
