"""The schema command's public name: ``python -m synclane_provider.core.schema [--schema NAME] sql|apply|status``.

The command lives in :mod:`synclane_provider.core.db.schema`, beside the migrations it applies; this module
keeps the name the docs, the error messages and existing scripts use.
"""

import sys

from synclane_provider.core.db.schema import create_schema, main

__all__ = ["create_schema", "main"]

if __name__ == "__main__":
    sys.exit(main())
