"""A broker as an older version answers: the methods it did not have yet UNIMPLEMENTED, every
other unary call relayed to a real broker behind it, which advertises this relay's address
(``--advertised-address``). Clients and other brokers then meet "an older broker" over real
gRPC, with the real broker doing the work."""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

import grpc


class OldBroker(grpc.GenericRpcHandler):
    """The relay; ``relayed`` counts every method asked of it, the refused ones included."""

    def __init__(self, unknown: Iterable[str]) -> None:
        self.unknown = frozenset(unknown)
        self.target: grpc.Channel | None = None
        self.server = grpc.server(ThreadPoolExecutor(8))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.add_generic_rpc_handlers((self,))
        self.relayed: Counter[str] = Counter()
        self.server.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def relay_to(self, address: str) -> None:
        self.target = grpc.insecure_channel(address)

    def service(self, handler_call_details):
        method = handler_call_details.method
        if method in self.unknown:
            self.relayed[method] += 1  # refused: UNIMPLEMENTED
            return None
        return grpc.unary_unary_rpc_method_handler(
            lambda raw, context: self._relay(method, raw, context))

    def _relay(self, method: str, raw: bytes, context: grpc.ServicerContext) -> bytes:
        self.relayed[method] += 1
        call = self.target.unary_unary(method, None, None)
        metadata = [(k, v) for k, v in context.invocation_metadata() if not k.startswith(":")]
        try:
            return call(raw, metadata=metadata, timeout=context.time_remaining())
        except grpc.RpcError as err:
            context.set_trailing_metadata(err.trailing_metadata() or ())
            context.abort(err.code(), err.details())

    def close(self) -> None:
        self.server.stop(None)
        if self.target is not None:
            self.target.close()
