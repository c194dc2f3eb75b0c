"""A tiny read-only JSON API over HTTP (standard library only), for the warehouse dashboard."""

from __future__ import annotations

import json
import logging
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

from inventory.errors import InventoryError, UnknownItemError
from inventory.reports import low_stock, valuation
from inventory.storage import Repository

log = logging.getLogger(__name__)


def _level_json(level) -> dict:
    return {"sku": str(level.sku), "location": level.location, "on_hand": level.on_hand,
            "reserved": level.reserved, "available": level.available}


class Handler(BaseHTTPRequestHandler):
    repo: Repository  # set by serve()

    def _send(self, status: HTTPStatus, body: object) -> None:
        data = json.dumps(body, default=str).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        url = urlparse(self.path)
        query = parse_qs(url.query)
        try:
            if url.path == "/health":
                self._send(HTTPStatus.OK, {"ok": True})
            elif url.path == "/stock":
                sku = query.get("sku", [None])[0]
                levels = [_level_json(l) for l in self.repo.levels() if sku is None or str(l.sku) == sku]
                self._send(HTTPStatus.OK, levels)
            elif url.path.startswith("/items/"):
                item = self.repo.get_item(url.path.removeprefix("/items/"))
                self._send(HTTPStatus.OK, {"sku": str(item.sku), "name": item.name,
                                           "unit_cost": item.unit_cost, "currency": item.currency})
            elif url.path == "/reports/valuation":
                table = valuation(self.repo)
                self._send(HTTPStatus.OK, {"rows": table.rows, "total": table.footer})
            elif url.path == "/reports/low-stock":
                self._send(HTTPStatus.OK, {"rows": low_stock(self.repo).rows})
            else:
                self._send(HTTPStatus.NOT_FOUND, {"error": f"no route {url.path}"})
        except UnknownItemError as exc:
            self._send(HTTPStatus.NOT_FOUND, {"error": str(exc)})
        except InventoryError as exc:
            self._send(HTTPStatus.BAD_REQUEST, {"error": str(exc)})
        except Exception:  # the dashboard gets a 500, the log gets the traceback
            log.exception("GET %s failed", self.path)
            self._send(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": "internal error"})

    def log_message(self, format: str, *args: object) -> None:
        log.info("%s - %s", self.address_string(), format % args)


def serve(repo: Repository, host: str = "127.0.0.1", port: int = 8080) -> ThreadingHTTPServer:
    """Start the server (call serve_forever() on the result). Read-only: no writes over HTTP."""
    handler = type("BoundHandler", (Handler,), {"repo": repo})
    server = ThreadingHTTPServer((host, port), handler)
    log.info("inventory API on http://%s:%d", host, server.server_address[1])
    return server
