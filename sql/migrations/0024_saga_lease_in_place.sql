-- The lease of a saga (saga_instances.owner, lease_until) as columns of one fixed size, so that
-- taking, renewing and releasing it rewrite those bytes in place (docs/saga.md, "Ownership,
-- lease, fencing, resume").
--
--   owner        CHAR(128) NOT NULL DEFAULT '': the worker that holds the saga, '' for none.
--                A CHAR is stored padded to its length (128 bytes for the ASCII names workers
--                use), so a new owner takes the space of the old one.
--   lease_until  DATETIME(6) NOT NULL DEFAULT '1970-01-01 00:00:00': the end of the lease; a
--                saga nobody holds has this past time, so "free" is the one range
--                lease_until < NOW(6) of idx_saga_resume.
--
-- With NULL for "none", each take and release of a lease changed the row's size, and InnoDB
-- rewrites a row whose size changes as a delete and an insert of the whole record, the payload
-- included (about 6 KB of redo per saga with an order's payload, where an in-place change
-- writes about 100 bytes).
--
-- Rows nobody holds get the new "none" values first (updated_at kept: it is when the saga last
-- moved). The ALTER runs only while the columns are still nullable (information_schema, run
-- through PREPARE), so an interrupted migration can be run again.

UPDATE saga_instances SET owner = '', updated_at = updated_at WHERE owner IS NULL;
UPDATE saga_instances SET lease_until = '1970-01-01 00:00:00', updated_at = updated_at
    WHERE lease_until IS NULL;

SET @txo_ddl = IF((SELECT COUNT(*) FROM information_schema.columns
        WHERE table_schema = DATABASE() AND table_name = 'saga_instances'
        AND column_name = 'lease_until' AND is_nullable = 'YES') = 0,
    'DO 0',
    'ALTER TABLE saga_instances
        MODIFY owner CHAR(128) NOT NULL DEFAULT '''',
        MODIFY lease_until DATETIME(6) NOT NULL DEFAULT ''1970-01-01 00:00:00''');
PREPARE txo_ddl FROM @txo_ddl;
EXECUTE txo_ddl;
DEALLOCATE PREPARE txo_ddl;
