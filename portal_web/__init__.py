"""The Flask operations portal: pages and a JSON API over the masters' management API.

It talks to the cluster only through ``lib`` (an :class:`lib.admin.AdminClient` per logged-in
user, holding that user's token), so every change it makes is checked and audited by the
masters with the portal user as the principal. ``python -m portal_web`` serves it with a real
WSGI server (cheroot), not Flask's development server.
"""
from lib.process import one_blas_thread

one_blas_thread()  # before the app's imports load numpy

from portal_web.app import create_app  # noqa: E402
from portal_web.config import PortalConfig  # noqa: E402

__all__ = ["PortalConfig", "create_app"]
