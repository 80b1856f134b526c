#!/usr/bin/python3
"""An independent EventSink server (proto/txo/v1/event_sink.proto) for txo's tests.

Written with python3-grpcio and python3-protobuf only, sharing no code with libtxo: what it
records is what really arrived over gRPC.

    event_sink_server.py --port P --pb2-dir DIR --record FILE [--control FILE] [--calls FILE]
                         [--tls-cert PEM --tls-key PEM [--tls-client-ca PEM]]

--pb2-dir   where `protoc --python_out` put txo/v1/event_sink_pb2.py (the tests generate it)
--record    every event the server took (ACCEPTED) is appended as one JSON line:
            {"call": N, "id": .., "type": .., "aggregate_type": .., "aggregate_id": ..,
             "idempotency_key": .., "created_at": .., "attempt": .., "payload_b64": ..,
             "traceparent": .., "tracestate": ..}, the trace fields "" when the event has none
--calls     one JSON line per call: {"call": N, "events": K, "answer": "OK"|"<STATUS>"|...,
            "trace_metadata": [the values of the call's traceparent and tracestate metadata]}
--tls-cert, --tls-key    serve TLS with this certificate and key (plaintext without them);
--tls-client-ca          and require a client certificate signed by this CA (mutual TLS)
--control   a JSON file re-read whenever its "version" changes, telling the server how to
            answer the next calls (each rule counts its own calls from that version on):
            {"version": 3,
             "status": "UNAVAILABLE", "status_calls": 2,    abort the next 2 calls so
             "sleep_ms": 1500, "sleep_calls": 1,            sleep before answering; with
             "process_before_sleep": true,                  this, record (take) the events
                                                            first: a deadline that passes
                                                            after the work was done
             "reject_permanent": ["key", ...],              per-event outcomes by
             "reject_transient": ["key", ...],              idempotency key
             "reason_suffix": "...",                        appended to permanent reasons
             "wrong_count_calls": 1}                        answer one result too few
The server de-duplicates nothing: every delivery is recorded, so the tests can count them.
It runs until killed (SIGTERM or SIGKILL).
"""
import argparse
import base64
import json
import os
import sys
import threading
import time
from concurrent import futures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--pb2-dir", required=True)
    ap.add_argument("--record", required=True)
    ap.add_argument("--calls")
    ap.add_argument("--control")
    ap.add_argument("--tls-cert")
    ap.add_argument("--tls-key")
    ap.add_argument("--tls-client-ca")
    args = ap.parse_args()

    sys.path.insert(0, args.pb2_dir)
    import grpc
    from txo.v1 import event_sink_pb2 as pb

    lock = threading.Lock()
    state = {"version": None, "rules": {}, "used": {}, "call": 0}
    record = open(args.record, "a", encoding="utf-8")
    calls = open(args.calls, "a", encoding="utf-8") if args.calls else None

    def rules():
        """The control file's rules, reloaded when its version changed (under lock)."""
        if not args.control or not os.path.exists(args.control):
            return state["rules"]
        try:
            with open(args.control, encoding="utf-8") as f:
                r = json.load(f)
        except (OSError, ValueError):
            return state["rules"]  # being replaced: keep the last one
        if r.get("version") != state["version"]:
            state["version"] = r.get("version")
            state["rules"] = r
            state["used"] = {}
        return state["rules"]

    def take(r, name):
        """True when rule name (with its name_calls budget) applies to this call."""
        budget = r.get(name + "_calls", 0)
        if state["used"].get(name, 0) >= budget:
            return False
        state["used"][name] = state["used"].get(name, 0) + 1
        return True

    def log_call(n, k, answer, context):
        if calls:
            trace = [v for name, v in context.invocation_metadata()
                     if name in ("traceparent", "tracestate")]
            calls.write(json.dumps({"call": n, "events": k, "answer": answer,
                                    "trace_metadata": trace}) + "\n")
            calls.flush()

    def record_events(n, events):
        for e in events:
            record.write(json.dumps({
                "call": n, "id": e.id, "type": e.type, "aggregate_type": e.aggregate_type,
                "aggregate_id": e.aggregate_id, "idempotency_key": e.idempotency_key,
                "created_at": e.created_at, "attempt": e.attempt,
                "payload_b64": base64.b64encode(e.payload).decode("ascii"),
                "traceparent": e.traceparent, "tracestate": e.tracestate,
            }) + "\n")
        record.flush()

    def publish(request, context):
        with lock:
            state["call"] += 1
            n = state["call"]
            r = rules()
            status = r.get("status") if take(r, "status") else None
            sleep_ms = r.get("sleep_ms", 0) if take(r, "sleep") else 0
            wrong_count = take(r, "wrong_count")
            perm = set(r.get("reject_permanent", []))
            suffix = r.get("reason_suffix", "")
            trans = set(r.get("reject_transient", []))
        if status:
            with lock:
                log_call(n, len(request.events), status, context)
            context.abort(getattr(grpc.StatusCode, status), "told to answer " + status)
        results = []
        accepted = []
        for e in request.events:
            if e.idempotency_key in perm:
                results.append(pb.Result(outcome=pb.Result.REJECTED_PERMANENT, event_id=e.id,
                                         reason="unknown product in " + e.idempotency_key + suffix))
            elif e.idempotency_key in trans:
                results.append(pb.Result(outcome=pb.Result.REJECTED_TRANSIENT, event_id=e.id,
                                         reason="inventory busy"))
            else:
                results.append(pb.Result(outcome=pb.Result.ACCEPTED, event_id=e.id))
                accepted.append(e)
        if wrong_count:
            results = results[:-1]
            accepted = []
        process_first = sleep_ms and r.get("process_before_sleep", False)
        if process_first or not sleep_ms:
            with lock:
                record_events(n, accepted)
        if sleep_ms:
            time.sleep(sleep_ms / 1000.0)
            if not process_first:
                if not context.is_active():
                    with lock:
                        log_call(n, len(request.events), "CLIENT_GONE", context)
                    return pb.PublishResponse()
                with lock:
                    record_events(n, accepted)
        with lock:
            log_call(n, len(request.events), "WRONG_COUNT" if wrong_count else "OK",
                     context)
        return pb.PublishResponse(results=results)

    handler = grpc.method_handlers_generic_handler("txo.v1.EventSink", {
        "Publish": grpc.unary_unary_rpc_method_handler(
            publish,
            request_deserializer=pb.PublishRequest.FromString,
            response_serializer=pb.PublishResponse.SerializeToString),
    })
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=4),
        options=[
            ("grpc.so_reuseport", 0),  # a second server on the port must fail, not share it
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.min_ping_interval_without_data_ms", 1000),
            ("grpc.http2.max_ping_strikes", 0),
            ("grpc.max_receive_message_length", 8 * 1024 * 1024),
        ])
    server.add_generic_rpc_handlers((handler,))
    address = "127.0.0.1:%d" % args.port
    if args.tls_cert:
        def read(path):
            with open(path, "rb") as f:
                return f.read()
        client_ca = read(args.tls_client_ca) if args.tls_client_ca else None
        creds = grpc.ssl_server_credentials(
            [(read(args.tls_key), read(args.tls_cert))], root_certificates=client_ca,
            require_client_auth=client_ca is not None)
        bound = server.add_secure_port(address, creds)
    else:
        bound = server.add_insecure_port(address)
    if bound == 0:
        print("event_sink_server: cannot listen on port %d" % args.port, file=sys.stderr)
        sys.exit(1)
    server.start()
    print("event_sink_server: listening on 127.0.0.1:%d" % args.port, flush=True)
    server.wait_for_termination()


if __name__ == "__main__":
    main()
