"""An OTLP/HTTP trace receiver for the end-to-end tests (tests/e2e/telemetry.rs).

It listens on 127.0.0.1 (a free port, printed on the first line), takes what an OpenTelemetry
exporter posts to /v1/traces, decodes it with the official `opentelemetry-proto` package, and
prints one JSON line per span: ids, parent, name, kind, status, attributes, the resource's
attributes, and the headers the export came with. `--marker TEXT` adds whether TEXT appeared
anywhere in the raw request body (a prompt that must not be exported).
"""

import argparse
import gzip
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

ARGS = argparse.ArgumentParser()
ARGS.add_argument("--marker", action="append", default=[])
OPTIONS = ARGS.parse_args()


def value(v):
    """A protobuf AnyValue as plain JSON."""
    kind = v.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: value(kv.value) for kv in v.kvlist_value.values}
    if kind == "bytes_value":
        return v.bytes_value.hex()
    return getattr(v, kind)


def attributes(kvs):
    return {kv.key: value(kv.value) for kv in kvs}


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        if self.headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        if self.path != "/v1/traces" or self.headers.get("content-type") != "application/x-protobuf":
            self.send_response(415)
            self.end_headers()
            print(json.dumps({"refused": self.path, "content_type": self.headers.get("content-type")}), flush=True)
            return
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        seen = {marker: marker.encode() in body for marker in OPTIONS.marker}
        headers = {k.lower(): v for k, v in self.headers.items()}
        for resource_spans in request.resource_spans:
            resource = attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    line = {
                        "trace_id": span.trace_id.hex(),
                        "span_id": span.span_id.hex(),
                        "parent_span_id": span.parent_span_id.hex(),
                        "name": span.name,
                        "kind": span.kind,
                        "status": {"code": span.status.code, "message": span.status.message},
                        "start": span.start_time_unix_nano,
                        "end": span.end_time_unix_nano,
                        "attributes": attributes(span.attributes),
                        "events": [e.name for e in span.events],
                        "resource": resource,
                        "scope": scope_spans.scope.name,
                        "headers": headers,
                        "markers": seen,
                    }
                    print(json.dumps(line), flush=True)
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
sys.stdout.flush()
server.serve_forever()
