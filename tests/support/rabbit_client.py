#!/usr/bin/python3
"""An AMQP client independent of txo and of rabbitmq-c (pika, Debian's python3-pika), for the
RabbitMQ tests (tests/support/testrabbit.h): what really reached the queues, and messages put
there without our publisher.

    rabbit_client.py declare URL QUEUE EXCHANGE BINDING_KEY [MAX_LENGTH]   durable queue bound
                                                              to a durable topic exchange (both
                                                              declared), holding at most
                                                              MAX_LENGTH messages (oldest dropped)
    rabbit_client.py drain URL QUEUE IDLE_SECONDS             every message of QUEUE, acked
                                                              (removed), one JSON line each, until
                                                              IDLE_SECONDS pass with nothing new
    rabbit_client.py count URL QUEUE                          ready messages of QUEUE
    rabbit_client.py describe URL QUEUE...                    "QUEUE: N ready, M consumers" each
    rabbit_client.py publish URL EXCHANGE ROUTING_KEY MESSAGE_ID BODY   one persistent message,
                                                              confirmed, content_type JSON
    rabbit_client.py delete URL QUEUE                         deletes the queue

Each drained line: {"routing_key", "exchange", "redelivered", "message_id", "type",
"content_type", "delivery_mode", "app_id", "timestamp", "headers", "body"}; header values that
are bytes are decoded as UTF-8. Exits non-zero with the reason on stderr on any error.
"""
import json
import sys

import pika


def connect(url):
    params = pika.URLParameters(url)
    params.socket_timeout = 10
    params.blocked_connection_timeout = 10
    return pika.BlockingConnection(params)


def plain(v):
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [plain(x) for x in v]
    if hasattr(v, "isoformat"):
        return v.isoformat()
    return v


def main(argv):
    cmd, url = argv[1], argv[2]
    conn = connect(url)
    ch = conn.channel()
    if cmd == "declare":
        queue, exchange, key = argv[3], argv[4], argv[5]
        ch.exchange_declare(exchange, exchange_type="topic", durable=True)
        args = {"x-max-length": int(argv[6])} if len(argv) > 6 else None
        ch.queue_declare(queue, durable=True, arguments=args)
        ch.queue_bind(queue, exchange, routing_key=key)
    elif cmd == "drain":
        queue, idle = argv[3], float(argv[4])
        ch.basic_qos(prefetch_count=1000)
        out = sys.stdout
        for method, props, body in ch.consume(queue, inactivity_timeout=idle):
            if method is None:
                break
            line = {
                "routing_key": method.routing_key,
                "exchange": method.exchange,
                "redelivered": method.redelivered,
                "message_id": props.message_id,
                "type": props.type,
                "content_type": props.content_type,
                "delivery_mode": props.delivery_mode,
                "app_id": props.app_id,
                "timestamp": props.timestamp,
                "headers": plain(props.headers or {}),
                "body": body.decode("utf-8", "replace"),
            }
            out.write(json.dumps(line, separators=(",", ":")) + "\n")
            ch.basic_ack(method.delivery_tag)
        ch.cancel()
    elif cmd == "count":
        q = ch.queue_declare(argv[3], passive=True)
        print(q.method.message_count)
    elif cmd == "describe":
        for name in argv[3:]:
            try:
                q = ch.queue_declare(name, passive=True)
                print("%s: %d ready, %d consumers" % (name, q.method.message_count,
                                                      q.method.consumer_count))
            except pika.exceptions.ChannelClosedByBroker as e:
                print("%s: %s" % (name, e))
                ch = conn.channel()
    elif cmd == "publish":
        exchange, key, msg_id, body = argv[3], argv[4], argv[5], argv[6]
        ch.confirm_delivery()
        ch.basic_publish(exchange, key, body.encode(), pika.BasicProperties(
            message_id=msg_id, delivery_mode=2, content_type="application/json"),
            mandatory=True)
    elif cmd == "delete":
        ch.queue_delete(argv[3])
    else:
        raise SystemExit("unknown command " + cmd)
    conn.close()


if __name__ == "__main__":
    try:
        main(sys.argv)
    except Exception as e:  # the C test prints this and fails
        sys.stderr.write("rabbit_client.py %s: %s: %r\n" % (" ".join(sys.argv[1:2]),
                                                           type(e).__name__, e))
        sys.exit(1)
