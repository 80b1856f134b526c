-- saga_steps keyed by what finds a step: PRIMARY KEY (saga_id, step_order), in place of an
-- AUTO_INCREMENT id with a unique index on (saga_id, step_order) (docs/saga.md, "Transactions
-- of a run").
--
-- Every read and write of a step names its saga and its number, so the unique index was the
-- way to every row and the id was never used. Each step inserted wrote both, and each step
-- read or changed went through the index to the row: now one B-tree does both (bench/
-- row_price.sh: the index was about 70% of a step row's insert). The rows of one saga sit
-- together, and the foreign key to saga_instances uses the key's first column.
--
-- Runs only while the id column is there (information_schema, run through PREPARE), so an
-- interrupted migration can be run again; the ALTER copies the table once.

SET @txo_ddl = IF((SELECT COUNT(*) FROM information_schema.columns
        WHERE table_schema = DATABASE() AND table_name = 'saga_steps'
        AND column_name = 'id') = 0,
    'DO 0',
    'ALTER TABLE saga_steps DROP COLUMN id, ADD PRIMARY KEY (saga_id, step_order),
        DROP INDEX uq_saga_step');
PREPARE txo_ddl FROM @txo_ddl;
EXECUTE txo_ddl;
DEALLOCATE PREPARE txo_ddl;
