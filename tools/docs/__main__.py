import sys

from tools.docs.engine import main

sys.exit(main())
