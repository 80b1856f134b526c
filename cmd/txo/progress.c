/*
 * The progress line of a long command: see progress.h.
 */
#include <stdio.h>

#include "progress.h"
#include "txo/txo.h"

static void *progress_main(void *arg)
{
    struct progress_line *p = arg;
    int64_t t0 = txo_monotonic_ms();
    while (!atomic_load(&p->done)) {
        for (int i = 0; i < 10 && !atomic_load(&p->done); i++)
            txo_sleep_ms(100);
        p->draw(p->arg, (double)(txo_monotonic_ms() - t0) / 1000.0);
        fflush(stderr);
    }
    fputc('\n', stderr);
    return NULL;
}

bool progress_line_start(struct progress_line *p, progress_draw_fn *draw, void *arg)
{
    p->draw = draw;
    p->arg = arg;
    atomic_init(&p->done, false);
    p->started = pthread_create(&p->tid, NULL, progress_main, p) == 0;
    return p->started;
}

void progress_line_stop(struct progress_line *p)
{
    if (!p->started)
        return;
    atomic_store(&p->done, true);
    pthread_join(p->tid, NULL);
    p->started = false;
}
