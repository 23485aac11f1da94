import sys

from pyserver.cli import main

sys.exit(main())
