-- inbox_ids: the event ids the inbox has recorded, whatever the layout of inbox_events
-- (txo/partition.h). txo_inbox_record_many() looks up the ids of a batch here
-- (src/inbox/inbox_sql.h, INBOX_SQL_KNOWN_MANY).
--
--   unpartitioned   a view of inbox_events: the lookup is a dive into its primary key, as
--                   before;
--   partitioned     a view of inbox_keys, the narrow table that keeps the duplicate check
--                   across the partitions: one dive, where inbox_events by event_id alone
--                   would take one per partition.
--
-- A layout change (`txo partition enable|disable inbox`) points the view at the other table.
-- A view costs nothing to write: the lookup merges into a query of the table it names. It runs
-- with its definer's rights (the migrate account's); readers need SELECT on it. Created only
-- when missing, so a run interrupted after the CREATE can be run again.

SET @txo_ddl = IF((SELECT COUNT(*) FROM information_schema.tables
        WHERE table_schema = DATABASE() AND table_name = 'inbox_ids') > 0,
    'DO 0',
    IF((SELECT COUNT(*) FROM information_schema.tables
            WHERE table_schema = DATABASE() AND table_name = 'inbox_keys'
            AND table_type = 'BASE TABLE') = 0,
        'CREATE VIEW inbox_ids AS SELECT event_id FROM inbox_events FORCE INDEX (PRIMARY)',
        'CREATE VIEW inbox_ids AS SELECT event_id FROM inbox_keys FORCE INDEX (PRIMARY)'));
PREPARE txo_ddl FROM @txo_ddl;
EXECUTE txo_ddl;
DEALLOCATE PREPARE txo_ddl;
