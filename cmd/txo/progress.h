/*
 * The progress line of a long command on a terminal (`txo relay --drain`, `txo replay`): a
 * thread of its own redraws one line on stderr once a second until the command stops it, then
 * ends the line. What the line says is the command's: a draw function it passes in.
 *
 * Thread-safety: draw runs on the progress thread, next to the command's own threads; a
 * progress line is started and stopped by one thread.
 */
#ifndef TXO_CMD_PROGRESS_H
#define TXO_CMD_PROGRESS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

/* Writes the line, "\r" first, without a newline; elapsed_s counts from the start. */
typedef void progress_draw_fn(void *arg, double elapsed_s);

struct progress_line {
    progress_draw_fn *draw;
    void *arg;
    atomic_bool done;
    pthread_t tid;
    bool started;
};

/* Starts redrawing (draw(arg, ...) once a second). False when the thread cannot start: then
 * there is no line, and progress_line_stop() is a no-op. */
bool progress_line_start(struct progress_line *p, progress_draw_fn *draw, void *arg);

/* Stops the thread (within a tenth of a second) and ends the line. A no-op when not started. */
void progress_line_stop(struct progress_line *p);

#endif
