"""pluglog-sqlite's tests run against the package as pip installs it.

When the distribution is not installed (``scripts/install-and-test.sh``
installs it), it is pip-installed once into a temporary target directory,
which goes on ``sys.path`` and on the ``PYTHONPATH`` of the broker processes
the tests start, so the ``sqlite`` provider is found through its entry
point like any third-party plugin.
"""

import importlib.metadata
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = os.path.dirname(HERE)
ROOT = os.path.dirname(os.path.dirname(PACKAGE))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def _ensure_installed():
    try:
        importlib.metadata.distribution("pluglog-sqlite")
        return
    except importlib.metadata.PackageNotFoundError:
        pass
    target = tempfile.mkdtemp(prefix="pluglog-sqlite-site-")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation"]
        + ["--target", target, PACKAGE],
        check=True,
        capture_output=True,
        timeout=300,
    )
    sys.path.insert(0, target)
    importlib.invalidate_caches()
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [target, os.environ.get("PYTHONPATH")])
    )


_ensure_installed()
