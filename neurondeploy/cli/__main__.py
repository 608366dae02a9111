import sys

from neurondeploy.cli.main import main

sys.exit(main())
