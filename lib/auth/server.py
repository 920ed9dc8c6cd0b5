"""Server side of authentication: one gRPC interceptor per process decides who is calling.

Every call but the public ones (a login, health checks, master status) must carry
``authorization: Bearer <token>`` (a client that logged in) or ``authorization: Cluster
<secret>`` (a broker or master: the cluster secret that ``cluster up`` makes, which no client
holds). The interceptor checks it before the handler runs, with no call to anything (tokens
are verified against the keyring held in memory), and refuses the call with UNAUTHENTICATED
naming what is wrong, without reading the request message (an anonymous caller cannot make
the server buffer and parse a large request). Then it takes the ACL decision the method's rule
asks for (lib/auth/rules.py) on the decoded request, and refuses with PERMISSION_DENIED naming
the principal, the operation and the resource; methods only brokers may call refuse every client
identity. A handler finds the caller and its rights in :data:`lib.auth.access.current_access`.

With ``auth = "none"`` (an explicit setting, logged loudly at start) every call passes, as
``anonymous``.

This module is the gRPC plumbing only: :class:`ServerAuth` (sync server, the master) and
:class:`AioServerAuth` (asyncio server, the broker) wrap each method's handler so that the
decision of :class:`lib.auth.gate.Gate` is applied before it runs. Who the caller is comes
from lib/auth/identities.py, what it may do from lib/auth/access.py.
"""
from __future__ import annotations

import inspect

import grpc

from lib.auth.access import OPEN, Access, current_access
from lib.auth.gate import Gate, Refused
from lib.auth.identities import ANONYMOUS, Identity
from lib.auth.rules import PUBLIC, Rule
from lib.errors import PermissionDenied, Unauthenticated
from lib.wire_errors import abort_with, abort_with_async


class ServerAuth(grpc.ServerInterceptor, Gate):
    """The interceptor of a synchronous gRPC server (the master)."""

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method
        decision = self.decide(handler_call_details)
        if isinstance(decision, Refused):
            return _unread(handler, self._refusing(decision, method))
        if decision is None:
            return _rebuilt(handler, lambda behaviour: self._open(behaviour, method))
        identity, rule = decision
        return _rebuilt(handler, lambda behaviour: self._serving_as(behaviour, identity, rule,
                                                                    method))

    def _open(self, behaviour, method: str):
        def run(request, context):
            current_access.set(OPEN)  # the pool thread may hold a previous call's access
            if self.screens_public():
                try:
                    self.access(ANONYMOUS, method, context, acls=False).check_address()
                except PermissionDenied as err:  # reported by check_address()
                    abort_with(context, err)
            return behaviour(request, context)
        return run

    def _serving_as(self, behaviour, identity: Identity | None, rule: Rule, method: str):
        def run(request, context):
            try:
                caller = self.identity(identity, context)
            except Unauthenticated as err:
                self.refused("", method, err, context)
                abort_with(context, err)
            access = self.access(caller, method, context)
            current_access.set(access)  # a sync server runs each call on one pool thread
            try:
                access.check_address()
                if rule.needs:
                    access.enforce(rule, request)
            except PermissionDenied as err:  # reported by check()
                abort_with(context, err)
            return behaviour(request, context)
        return run

    def _refusing(self, refusal: Refused, method: str):
        def run(_requests, context):  # never iterated: see _unread
            self.refused(refusal.principal, method, refusal.error, context)
            abort_with(context, refusal.error)
        return run


class AioServerAuth(grpc.aio.ServerInterceptor, Gate):
    """The interceptor of an asyncio gRPC server (the broker). Each call runs in its own task,
    so the access set at its start stays with that call."""

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method
        decision = self.decide(handler_call_details)
        if decision is None:
            if not self.screens_public():
                return handler
            return _rebuilt(handler, lambda behaviour: self._serving_as(
                behaviour, ANONYMOUS, PUBLIC, method))
        if isinstance(decision, Refused):
            return _unread(handler, self._refusing(decision, method))
        identity, rule = decision
        return _rebuilt(handler, lambda behaviour: self._serving_as(behaviour, identity, rule,
                                                                    method))

    def _serving_as(self, behaviour, identity: Identity | None, rule: Rule, method: str):
        if inspect.isasyncgenfunction(behaviour):
            async def stream(request, context):
                # streams are IN_HANDLER: the handler checks (all but the IP lists)
                access = await self._admitted(identity, rule, method, None, context)
                current_access.set(access)
                async for response in behaviour(request, context):
                    yield response
            return stream

        async def run(request, context):
            current_access.set(await self._admitted(identity, rule, method, request, context))
            return await behaviour(request, context)
        return run

    async def _admitted(self, identity: Identity | None, rule: Rule, method: str, request,
                        context) -> Access:
        """The call's access once the IP lists and the rule's needs let it through."""
        public = rule.kind == "public"
        caller = ANONYMOUS if public else await self._caller(identity, method, context)
        access = self.access(caller, method, context, acls=not public)
        try:
            access.check_address()
            if rule.needs and request is not None:
                access.enforce(rule, request)
        except PermissionDenied as err:  # reported by check()
            await abort_with_async(context, err)
        return access if not public else OPEN

    async def _caller(self, identity: Identity | None, method: str, context) -> Identity:
        try:
            return self.identity(identity, context)
        except Unauthenticated as err:
            self.refused("", method, err, context)
            await abort_with_async(context, err)
            raise  # abort raises; this line is never reached

    def _refusing(self, refusal: Refused, method: str):
        async def run(_requests, context):  # never iterated: see _unread
            self.refused(refusal.principal, method, refusal.error, context)
            await abort_with_async(context, refusal.error)
        return run


_KINDS = (("unary_unary", grpc.unary_unary_rpc_method_handler),
          ("unary_stream", grpc.unary_stream_rpc_method_handler),
          ("stream_unary", grpc.stream_unary_rpc_method_handler),
          ("stream_stream", grpc.stream_stream_rpc_method_handler))


def _rebuilt(handler, wrap):
    for kind, factory in _KINDS:
        behaviour = getattr(handler, kind)
        if behaviour is not None:
            return factory(wrap(behaviour), request_deserializer=handler.request_deserializer,
                           response_serializer=handler.response_serializer)
    return handler


def _unread(handler, behaviour):
    """A handler that runs ``behaviour(request_iterator, context)`` without reading a request.

    For a refused call. A unary-request handler makes grpc read the whole request message
    before the behaviour runs: up to max_receive_message_length (64 MiB) buffered by the core,
    copied to Python and parsed, about three times its size at peak, for any anonymous caller.
    A streaming-request handler gets a lazy iterator instead; left unread, the core takes no
    more than the HTTP/2 flow-control window, and the abort resets the stream. Unary and
    streaming calls look the same on the wire, so the client sees only the status.
    (tests/integration/test_request_limits.py measures it.)"""
    response_streams = handler.unary_stream is not None or handler.stream_stream is not None
    factory = (grpc.stream_stream_rpc_method_handler if response_streams
               else grpc.stream_unary_rpc_method_handler)
    return factory(behaviour, request_deserializer=handler.request_deserializer,
                   response_serializer=handler.response_serializer)
