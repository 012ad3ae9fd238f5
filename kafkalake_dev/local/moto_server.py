"""moto's server as the local stack runs it: ``python -m kafkalake_dev.local.moto_server -H host -p port``.

moto's own ``main``, less two costs its development server pays on every request, which the suite's tens of
thousands of requests add up (seen with py-spy: about a sixth of the server's CPU): the names of moto's service
folders, listed from disk by ``get_backend_for_host`` for each request, are listed once; werkzeug's access log (a
line per request) is off, its warnings and errors stay.
"""

from __future__ import annotations

import logging

from moto import backends
from moto.server import main

SERVICE_FOLDERS = tuple(backends.list_of_moto_modules())


def listed_once() -> tuple[str, ...]:
    return SERVICE_FOLDERS


if __name__ == "__main__":
    backends.list_of_moto_modules = listed_once
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    main()
