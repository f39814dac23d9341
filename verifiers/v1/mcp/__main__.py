"""``python -m verifiers.v1.mcp``: serve the toolset class ``VF_TOOLSET`` names over stdio."""

import os
import sys

from verifiers.v1.mcp.toolset import ENV_TOOLSET, import_ref, serve

if __name__ == "__main__":
    ref = os.environ.get(ENV_TOOLSET)
    if not ref:
        sys.exit(f"{ENV_TOOLSET} names no toolset class (module:QualName)")
    serve(import_ref(ref))
