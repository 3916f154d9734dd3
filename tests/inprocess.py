"""A test's own HTTP server in this process: Starlette routes served by uvicorn on a free port
in a daemon thread, for endpoints whose behaviour a test plants (a timing, a fault)."""

import threading
import time

import uvicorn
from starlette.applications import Starlette


class InProcessServer:
    """`with` serves `routes()` and sets `base_url`; leaving it stops the server and its thread."""

    def routes(self) -> list:
        raise NotImplementedError

    def __enter__(self):
        config = uvicorn.Config(Starlette(routes=self.routes()), host="127.0.0.1", port=0, log_level="error")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        while not self.server.started:
            time.sleep(0.01)
        self.base_url = f"http://127.0.0.1:{self.server.servers[0].sockets[0].getsockname()[1]}"
        return self

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join()
