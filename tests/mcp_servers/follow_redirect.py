"""A browser that consents: ``$BROWSER`` for the login tests (``python follow_redirect.py URL``).

It opens the authorization address and follows the redirects back to tidegauge's loopback
receiver, as a user's browser does once they consent; exit 0 when tidegauge said "authorized".
"""

from __future__ import annotations

import sys

import httpx

page = httpx.get(sys.argv[1], follow_redirects=True, timeout=60, trust_env=False)
sys.exit(0 if page.status_code == 200 and "authorized" in page.text else 1)
