-- SKUs are identifiers and are compared byte for byte. Under the server's default collation
-- (utf8mb4_*_ci, PAD SPACE) "FUZZ-SKU" and "fuzz-sku " named the row of "fuzz-sku": an
-- order for a SKU that does not exist reserved another SKU's stock. utf8mb4_nopad_bin also
-- counts trailing spaces (utf8mb4_bin would still ignore them). The foreign key from
-- inventory_reservations to inventory joins columns that must share one collation, and
-- MariaDB will not change a column under a foreign key, so the key is dropped and made
-- again around the change. No two existing SKUs can collide: the old collation was the
-- coarser one.
ALTER TABLE inventory_reservations DROP FOREIGN KEY inventory_reservations_ibfk_1;
ALTER TABLE inventory
    MODIFY sku VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL;
ALTER TABLE inventory_reservations
    MODIFY sku VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL;
ALTER TABLE inventory_reservations
    ADD CONSTRAINT inventory_reservations_ibfk_1 FOREIGN KEY (sku) REFERENCES inventory (sku);
ALTER TABLE order_items
    MODIFY sku VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL;
