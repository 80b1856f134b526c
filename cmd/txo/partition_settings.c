/*
 * The partitioned outbox's settings (txo/partition.h), shared by `txo partition` and every
 * cleaner (`txo clean`, the relay's, the worker's): one table of them (clean.h).
 */
#include "clean.h"

void settings_add_partition(struct settings_table *t, struct txo_partition_opts *po, bool copy)
{
    txo_partition_opts_init(po);
    const struct setting every[] = {
        {.name = "partition-span",
         .env = "TXO_PARTITION_SPAN",
         .type = SETTING_UINT,
         .def = "86400",
         .help = "a partitioned table (txo partition): seconds a new partition should hold: "
                 "the outbox's at the append rate measured over the newest full one, the "
                 "inbox's exactly (aligned in UTC)",
         .min = 60,
         .max = 31536000,
         .target = &po->span_s},
        {.name = "partition-ahead",
         .env = "TXO_PARTITION_AHEAD",
         .type = SETTING_UINT,
         .def = "2",
         .help = "a partitioned table: empty partitions kept ready ahead (above the outbox's ids "
                 "in use, after now for the inbox)",
         .min = 1,
         .max = TXO_PARTITION_AHEAD_MAX,
         .target = &po->ahead},
    };
    const struct setting copying[] = {
        {.name = "partition-first-ids",
         .env = "TXO_PARTITION_FIRST_IDS",
         .type = SETTING_I64,
         .def = "1000000",
         .help = "the outbox's ids per partition of the first partitions (enable); later ones "
                 "follow the rate, or the last one's width",
         .min = 1,
         .max = 4000000000UL,
         .target = &po->first_ids},
        {.name = "partition-batch",
         .env = "TXO_PARTITION_BATCH",
         .type = SETTING_UINT,
         .def = "2000",
         .help = "enable, disable: rows copied per transaction",
         .min = 1,
         .max = 100000,
         .target = &po->batch},
        {.name = "partition-pause",
         .env = "TXO_PARTITION_PAUSE_MS",
         .type = SETTING_UINT,
         .def = "0",
         .help = "enable, disable: milliseconds between two copy batches, to leave the server to "
                 "the writers",
         .max = 60000,
         .target = &po->pause_ms},
    };
    settings_add(t, every, TXO_ARRAY_LEN(every));
    if (copy)
        settings_add(t, copying, TXO_ARRAY_LEN(copying));
}
