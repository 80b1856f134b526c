/*
 * Private to the HTTP server (src/http/server*.c): the connection and server structs and the
 * functions the server's files share. The server is split by job:
 *
 *   server.c          start and stop, the I/O thread's event loop
 *   server_conn.c     one connection's state machine: read, parse, hand over, write, linger
 *   server_slots.c    which connections get a slot: accept, limits, deadlines
 *   server_handler.c  the handler threads: the request view, the response and its bytes
 *
 * Every connection belongs to the I/O thread, except while it is HANDLING: then the handler
 * thread that took it from the work queue owns it until it pushes it on the done queue. So the
 * fields of struct conn need no lock; the queues of struct txo_http_server do (mu).
 */
#ifndef TXO_HTTP_SERVER_INTERNAL_H
#define TXO_HTTP_SERVER_INTERNAL_H

#include "txo/http_server.h"

#include "http/parse.h"

#include <openssl/ssl.h>
#include <pthread.h>
#include <stdatomic.h>

/*
 * Where a connection is. All transitions are made by the I/O thread, except HANDLING, which a
 * handler thread leaves by pushing the connection on the done queue.
 */
enum conn_state {
    CONN_IDLE,     /* keep-alive, no byte of the next request yet; -> HEAD, closed */
    CONN_HEAD,     /* reading a request head; -> BODY, HANDLING, WRITING (refused), closed */
    CONN_BODY,     /* reading the body; -> HANDLING, WRITING (refused), closed */
    CONN_HANDLING, /* queued for or run by a handler thread; -> WRITING */
    CONN_WRITING,  /* writing the response; -> IDLE, HEAD (pipelined), LINGER, closed */
    CONN_LINGER,   /* write side shut, discarding input until EOF or the deadline; -> closed */
};

/*
 * What a connection's slot is to the slot policy (server_slots.c), derived from its state by
 * txo__http_slot_file() whenever the state may have changed.
 */
enum conn_slot {
    SLOT_BUSY,        /* a request in hand (handled, or its response written): never taken */
    SLOT_RECLAIMABLE, /* nothing of a request in hand: idle keep-alive, silent since accept, or
                       * lingering after a refusal; closed to admit a new connection */
    SLOT_READING,     /* a request partly read (head or body): at most max_reading of them */
};

/* A list of connections, the first in line at head. */
struct conn_list {
    struct conn *head, *tail;
    unsigned n;
};

struct conn {
    struct conn *prev, *next;           /* srv->conns: every open connection */
    struct conn *queue_next;            /* the work queue or the done queue */
    struct conn *slot_prev, *slot_next; /* srv->reclaimable or srv->reading, after slot */
    enum conn_slot slot;
    struct txo_http_server *srv;
    int fd;
    SSL *ssl;
    uint32_t peer; /* IPv4 address, network order */
    enum conn_state state;
    bool registered; /* in the epoll set */
    uint32_t events; /* registered for */
    int64_t deadline_ms;

    char *in; /* received bytes: the request being read, then what follows it; NULL when none */
    size_t in_len, in_cap;
    struct txo__http_head head; /* valid from BODY to WRITING; spans point into in */
    size_t req_end;             /* bytes of in that belong to the current request */
    struct txo__http_chunked chunked;
    size_t feed_off;  /* chunked: bytes of in decoded so far */
    char *body;       /* chunked: the decoded body (max_body_bytes + 1) */
    size_t body_len;  /* chunked: decoded so far */
    bool close_after; /* close once the response is written */

    char *out; /* bytes to write: an interim 100 Continue, then the response; NULL when none */
    size_t out_len, out_off;
    char *resp; /* HANDLING -> WRITING: the serialized response from the handler thread */
    size_t resp_len;
    size_t resp_off; /* bytes of resp the handler thread already wrote */
    bool resp_close;

    bool write_blocked;    /* the last write would block: wait for EPOLLOUT */
    bool read_wants_write; /* TLS: SSL_read needs the socket writable */
    bool write_wants_read; /* TLS: SSL_write needs the socket readable */
};

/* A FIFO of connections linked through conn.queue_next (the server's mu guards both queues). */
struct conn_queue {
    struct conn *head, *tail;
};

struct txo_http_server {
    struct txo_http_server_opts opts; /* host is not kept */
    struct txo_metric *m_requests;    /* opts.metrics' families; NULL without */
    struct txo_metric *m_duration;
    txo_http_handler_fn handler;
    void *arg;
    unsigned port;
    SSL_CTX *tls;

    int listen_fd;
    int epoll_fd;
    int wake_fd;  /* eventfd: the done queue or stop */
    char tags[2]; /* epoll data for listen_fd and wake_fd */
    pthread_t io_thread;
    struct conn *conns; /* I/O thread only, like the slot lists and counts below */
    unsigned n_conns;
    unsigned n_handling;
    struct conn_list reclaimable; /* SLOT_RECLAIMABLE: lingering first, then idle, oldest first */
    struct conn_list reading;     /* SLOT_READING, oldest request first */
    unsigned max_reading;         /* a quarter of max_connections, at least 1 */
    unsigned peak_conns;          /* the most connections open since memory was last trimmed */
    atomic_bool stopping;

    pthread_mutex_t mu; /* the two queues and quit */
    pthread_cond_t work_cv;
    struct conn_queue work;
    struct conn_queue done; /* connections go idle in the order answered */
    bool quit;
    pthread_t *workers;
    unsigned n_workers;
};

/* ---- server_handler.c: the queues between the I/O thread and the handler threads ---- */

/* Appends c to q. */
void txo__http_queue_push(struct conn_queue *q, struct conn *c);

/* Takes the first connection of q; NULL when q is empty. */
struct conn *txo__http_queue_pop(struct conn_queue *q);

/* ---- server_conn.c: one connection, on the I/O thread ---- */

/* Unlinks c from the server, closes its socket and frees it. */
void txo__http_conn_close(struct conn *c);

/* Starts reading a request head: the head deadline runs from now. */
void txo__http_conn_start_request(struct conn *c, int64_t now);

/*
 * Brings c's epoll registration and its slot list (txo__http_slot_file) in line with its
 * state. False when epoll failed (the caller closes c).
 */
bool txo__http_conn_watch(struct conn *c);

/*
 * Answers c with a refusal (a JSON {"error","message"}, Connection: close), then lingers and
 * closes. message is copied. Returns whether c is still open; after false c is freed.
 */
bool txo__http_conn_refuse(struct conn *c, int status, const char *error, const char *message);

/* Handles the epoll events of c. c may be freed when this returns. */
void txo__http_conn_event(struct conn *c, uint32_t events);

/* Takes the connections the handler threads are done with and writes their responses. */
void txo__http_take_done(struct txo_http_server *srv);

/* ---- server_slots.c: which connections get a slot, on the I/O thread ---- */

/* Moves c to the slot list of its state; it keeps its place when its slot is unchanged. */
void txo__http_slot_file(struct conn *c);

/* Takes c off its slot list (it is being closed). */
void txo__http_slot_leave(struct conn *c);

/*
 * Runs between two batches of epoll events, because it closes connections other than the one
 * an event is for, and a later event of the same batch could name one of them: refuses the
 * oldest requests still being read beyond max_reading, then, when listen_ready, accepts every
 * pending connection, taking reclaimable slots when all are in use, or turns it away (503).
 */
void txo__http_admit(struct txo_http_server *srv, bool listen_ready);

/*
 * Enforces the deadlines (server.c's comment) of every connection at time now, and returns
 * free memory to the kernel once the open connections have fallen well below their peak.
 */
void txo__http_sweep(struct txo_http_server *srv, int64_t now);

/* ---- server_handler.c: the handler threads ---- */

/* The body of a handler thread: runs requests from the work queue until srv->quit. */
void *txo__http_worker_main(void *arg);

/*
 * Serializes a response into one buffer (head and body: one write, no Nagle delay). Returns
 * the buffer (txo_free) and its length, or NULL when out of memory.
 */
char *txo__http_serialize(const struct txo_http_response *r, bool head_only, bool close,
                          bool http10_keep_alive, size_t *len);

/* A refusal's body, {"error":code,"message":text} (txo_free); NULL when out of memory. */
char *txo__http_refusal_body(const struct txo__http_refusal *why);

#endif
