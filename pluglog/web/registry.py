"""The schema registry's REST resource: Confluent Schema Registry paths and bodies.

Serves the subset real clients (confluent-kafka's SchemaRegistryClient, the
Java serializers, curl scripts) call, at Confluent's paths, so
``schema.registry.url`` is just the broker's ``--http`` address:

* ``/subjects`` (list), ``/subjects/S`` (POST look up, DELETE),
  ``/subjects/S/versions`` (GET list, POST register),
  ``/subjects/S/versions/V`` (GET, DELETE), ``.../V/schema``, ``.../V/referencedby``
* ``/schemas/types``, ``/schemas/ids/N``, ``.../N/schema``, ``.../N/subjects``,
  ``.../N/versions``
* ``/config`` and ``/config/S`` (GET, PUT, DELETE),
  ``/compatibility/subjects/S/versions[/V]`` (POST), ``/mode`` (GET)

In a broker the resource has a :class:`~pluglog.serialization.replicated.RegistryNode`:
writes (register, deletes, config changes) run on the leader of ``_schemas``-0
and are answered after the high watermark, or are forwarded to it over HTTP
(:mod:`pluglog.web.forward`); reads are served from this broker's replica.

Every answer is JSON; errors carry Confluent's ``{"error_code", "message"}``
body and status, unexpected failures a 500 with code 50001 (logged, never a
traceback page).
"""

import io
import json

from twisted.internet import defer
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web import resource

from pluglog.errors import KafkaError
from pluglog.serialization.registry import MAX_SCHEMA_BYTES, RegistryError
from pluglog.web.site import json_response

log = Logger()

TOP_LEVEL = ("subjects", "schemas", "config", "compatibility", "mode")
#: Bodies are schemas (or tiny config objects); a schema at the size limit
#: escaped as JSON is at most about twice its size.
MAX_BODY_BYTES = 2 * MAX_SCHEMA_BYTES + 65536


def _is_write(top, method, path):
    """PUT and DELETE, and POST /subjects/S/versions (register)."""
    if method in ("PUT", "DELETE"):
        return True
    return top == "subjects" and method == "POST" and len(path) == 2


def _error_answer(exc, request):
    """``(status, body)`` for an exception a handler raised."""
    if isinstance(exc, RegistryError):
        return exc.status, exc.body()
    if isinstance(exc, KafkaError):
        log.warn("schema registry store error: {exc}", exc=exc)
        return 500, {"error_code": 50001, "message": f"Error in the backend data store: {exc}"}
    if isinstance(exc, UnicodeDecodeError):
        return 400, {"error_code": 400, "message": "path is not UTF-8"}
    log.failure("schema registry request {uri} failed", Failure(exc), uri=request.uri)
    return 500, {"error_code": 50001, "message": "Internal error in the schema registry"}


def _flag(request, name):
    values = request.args.get(name.encode(), [b"false"])
    return values[-1].lower() == b"true"


def _not_found():
    return RegistryError(404, 404, "HTTP 404 Not Found")


def _method_not_allowed():
    return RegistryError(405, 405, "HTTP 405 Method Not Allowed")


class RegistryResource(resource.Resource):
    """One leaf per top-level path; dispatches on method and the rest of the path."""

    isLeaf = True  # noqa: N815 - twisted.web name

    def __init__(self, registry, node=None):
        super().__init__()
        self.registry = registry
        #: The broker's RegistryNode (pluglog.serialization.replicated): writes
        #: run on the leader of _schemas-0 or are forwarded to it. None: a
        #: registry of its own (tests), written synchronously.
        self.node = node

    def render(self, request):
        try:
            top = request.prepath[-1].decode("utf-8")
            path = [p.decode("utf-8") for p in request.postpath]
            while path and path[-1] == "":
                path.pop()
            method = request.method.decode()
            handler = getattr(self, f"_{top}")
            if self.node is not None and self._routed(top, method, path):
                return self._render_routed(request, handler, top, method, path)
            status, body = handler(request, method, path)
        except Exception as exc:  # noqa: BLE001 - _error_answer sorts them out
            status, body = _error_answer(exc, request)
        return json_response(request, status, body)

    # -- cluster: writes on the leader -------------------------------------------

    def _routed(self, top, method, path):
        """Writes go to the leader; so do reads where we host no replica."""
        if _is_write(top, method, path):
            return True
        return self.node.store.exists() and not self.node.hosts_replica()

    def _render_routed(self, request, handler, top, method, path):
        from twisted.web.server import NOT_DONE_YET

        from pluglog.web.forward import FORWARDED_HEADER, forward

        raw = request.content.read(MAX_BODY_BYTES + 1)
        if len(raw) > MAX_BODY_BYTES:
            request.content = io.BytesIO(raw)
            self._body(request)  # raises the 42201 here, not after forwarding it
        node = self.node
        forwarded = request.getHeader(FORWARDED_HEADER) is not None

        def local():
            request.content = io.BytesIO(raw)
            return handler(request, method, path)

        @defer.inlineCallbacks
        def run():
            url = yield node.route()
            if url is None:
                if not _is_write(top, method, path):
                    return local()
                return (yield node.write(local))
            if forwarded:
                # Leadership moved while the request travelled: no loops.
                raise RegistryError(
                    500,
                    50003,
                    f"Error while forwarding the request to the leader: broker "
                    f"{node.broker.node_id} does not lead; broker {node.leader_id()} does",
                )
            return (
                yield forward(node.reactor, url, request, raw, node.broker.node_id, node.timeout_s)
            )

        lost = []
        request.notifyFinish().addErrback(lost.append)

        def answer(result):
            if isinstance(result, Failure):
                status, body = _error_answer(result.value, request)
            else:
                status, body = result
            if lost:
                return  # the client went away; nothing to answer
            request.write(json_response(request, status, body))
            request.finish()

        run().addBoth(answer)
        return NOT_DONE_YET

    # -- bodies ------------------------------------------------------------------

    @staticmethod
    def _body(request):
        data = request.content.read(MAX_BODY_BYTES + 1)
        if len(data) > MAX_BODY_BYTES:
            raise RegistryError(
                422,
                42201,
                f"Invalid schema: request body is larger than {MAX_BODY_BYTES} bytes "
                f"(schemas are limited to {MAX_SCHEMA_BYTES} bytes)",
            )
        try:
            body = json.loads(data)
        except ValueError as exc:
            raise RegistryError(400, 400, f"Request body is not valid JSON: {exc}") from None
        if not isinstance(body, dict):
            raise RegistryError(422, 422, "Request body must be a JSON object")
        return body

    def _schema_body(self, request):
        body = self._body(request)
        if "schema" not in body:
            raise RegistryError(422, 42201, "Invalid schema: the request has no 'schema' field")
        return body["schema"], body.get("schemaType") or "AVRO", body.get("references")

    # -- /subjects ------------------------------------------------------------------

    def _subjects(self, request, method, path):
        reg = self.registry
        deleted = _flag(request, "deleted")
        if not path:
            if method != "GET":
                raise _method_not_allowed()
            return 200, reg.subject_names(deleted=deleted)
        subject, rest = path[0], path[1:]
        if not rest:
            if method == "POST":
                schema, schema_type, refs = self._schema_body(request)
                _text, decoded = reg.check_schema(schema, schema_type, refs)
                reg.versions(subject, deleted=deleted)  # 40401 first
                entry = reg.find(subject, decoded, schema_type, deleted=deleted)
                if entry is None:
                    raise RegistryError(404, 40403, "Schema not found")
                return 200, entry.to_json()
            if method == "DELETE":
                return 200, reg.delete_subject(subject, _flag(request, "permanent"))
            raise _method_not_allowed()
        if rest[0] != "versions":
            raise _not_found()
        if len(rest) == 1:
            if method == "GET":
                return 200, [v.version for v in reg.versions(subject, deleted=deleted)]
            if method == "POST":
                schema, schema_type, refs = self._schema_body(request)
                entry = reg.register_version(subject, schema, schema_type, refs)
                return 200, {"id": entry.schema_id}
            raise _method_not_allowed()
        version = rest[1]
        if len(rest) == 2:
            if method == "GET":
                return 200, reg.version(subject, version, deleted=deleted).to_json()
            if method == "DELETE":
                return 200, reg.delete_version(subject, version, _flag(request, "permanent"))
            raise _method_not_allowed()
        if len(rest) == 3 and method == "GET":
            entry = reg.version(subject, version, deleted=deleted)
            if rest[2] == "schema":
                return 200, json.loads(entry.schema)
            if rest[2] == "referencedby":
                return 200, []
        raise _not_found()

    # -- /schemas -------------------------------------------------------------------

    def _schemas(self, request, method, path):
        if method != "GET":
            raise _method_not_allowed()
        reg = self.registry
        if path == ["types"]:
            from pluglog.serialization import json_schema

            return 200, ["AVRO", "JSON"] if json_schema.available() else ["AVRO"]
        if len(path) < 2 or path[0] != "ids":
            raise _not_found()
        schema, schema_type = reg.schema_by_id(path[1])
        if len(path) == 2:
            body = {"schema": schema}
            if schema_type != "AVRO":
                body["schemaType"] = schema_type
            return 200, body
        deleted = _flag(request, "deleted")
        if path[2:] == ["schema"]:
            return 200, json.loads(schema)
        if path[2:] == ["subjects"]:
            return 200, sorted({v.subject for v in reg.subjects_of(path[1], deleted)})
        if path[2:] == ["versions"]:
            return 200, [
                {"subject": v.subject, "version": v.version}
                for v in sorted(
                    reg.subjects_of(path[1], deleted), key=lambda v: (v.subject, v.version)
                )
            ]
        raise _not_found()

    # -- /config, /compatibility, /mode ------------------------------------------------

    def _config(self, request, method, path):
        reg = self.registry
        if len(path) > 1:
            raise _not_found()
        subject = path[0] if path else None
        if method == "GET":
            if subject is not None and subject not in reg.configs:
                if not _flag(request, "defaultToGlobal"):
                    detail = "does not have subject-level compatibility configured"
                    raise RegistryError(404, 40408, f"Subject '{subject}' {detail}")
            return 200, {"compatibilityLevel": reg.level(subject)}
        if method == "PUT":
            body = self._body(request)
            return 200, {"compatibility": reg.set_level(subject, body.get("compatibility"))}
        if method == "DELETE":
            return 200, {"compatibilityLevel": reg.delete_level(subject)}
        raise _method_not_allowed()

    def _compatibility(self, request, method, path):
        reg = self.registry
        if method != "POST":
            raise _method_not_allowed()
        if len(path) not in (3, 4) or path[0] != "subjects" or path[2] != "versions":
            raise _not_found()
        subject = path[1]
        schema, schema_type, refs = self._schema_body(request)
        _text, decoded = reg.check_schema(schema, schema_type, refs)
        if len(path) == 4:
            try:
                against = [reg.version(subject, path[3])]
            except RegistryError as exc:
                if exc.code != 40401 or reg.parse_version(path[3]) is not None:
                    raise
                against = []  # "latest" of a new subject: anything goes
        else:
            try:
                against = reg.versions(subject)
            except RegistryError:
                against = []
        problems = reg.compatibility_problems(subject, decoded, against, schema_type)
        body = {"is_compatible": not problems}
        if _flag(request, "verbose"):
            body["messages"] = problems
        return 200, body

    def _mode(self, request, method, path):
        if method != "GET" or len(path) > 1:
            raise _method_not_allowed()
        return 200, {"mode": "READWRITE"}


def add_registry(broker, root):
    """Load ``_schemas`` (if it exists yet) and serve the registry under ``root``.

    The topic is created by the first write. Returns a Deferred fired once
    loaded (the listener waits for it)."""
    from pluglog.serialization.replicated import RegistryNode

    node = RegistryNode(broker)
    registry = node.registry
    node.start()
    log.info(
        "schema registry loaded {count} offset(s) of _schemas: {subjects} subject(s), "
        "{ids} schema id(s)",
        count=node.applied,
        subjects=len(registry.subject_names()),
        ids=len(registry.ids),
    )
    if registry.skipped:
        log.warn("skipped {n} unreadable _schemas record(s)", n=registry.skipped)
    leaf = RegistryResource(registry, node)
    for name in TOP_LEVEL:
        root.putChild(name.encode(), leaf)
    broker.schema_registry = registry
    return defer.succeed(node)
