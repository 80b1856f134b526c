/*
 * Named crash points, for fault tests only. Code that must survive a crash at a given moment
 * calls txo_crash_point("relay.after_publish"). When a test configured that name (through the
 * TXO_CRASH_POINT setting of the `txo` command), the process kills itself with SIGKILL right
 * there: no cleanup, no buffered output flushed, exactly like a power cut of the process.
 *
 * Thread-safety: txo_crash_point() may be called from any thread; txo_crash_point_set() is
 * for start-up.
 */
#ifndef TXO_CRASH_H
#define TXO_CRASH_H

#include "txo/common.h"

/* Arms the named point (copied); NULL or "" disarms. `after` = how many passes to let through
 * first (0 = crash on the first pass). */
TXO_API void txo_crash_point_set(const char *name, unsigned after);

/* Crashes the process with SIGKILL when name is the armed point. Otherwise does nothing. */
TXO_API void txo_crash_point(const char *name);

#endif
