/*
 * Every SQL statement of the relay's shard membership (src/relay/shards.c), one named macro
 * each, with the index it relies on, the rows it locks and the isolation it assumes. The
 * schema is sql/migrations/0014_outbox_shards.sql: outbox_shards (64 rows), outbox_relays
 * (one row per live relay). Both tables are tiny; every statement here runs once per
 * membership tick (a few per lease), except RELAY_SHARD_SQL_HOLD, which every ordered claim
 * runs first.
 *
 * A relay is known by its member id: "<relay_id>:<uuid>", fresh for each txo_relay, so two
 * relays in one process (or two with the same --relay-id) are two members.
 */
#ifndef TXO_RELAY_SHARD_SQL_H
#define TXO_RELAY_SHARD_SQL_H

/*
 * The claim's fence, first statement of every ordered claim transaction: share-locks the
 * member's shards whose hold is valid and returns them; the claim then takes only rows of
 * these shards (bound as values, relay_sql.h). A takeover (RELAY_SHARD_SQL_TAKE_IN) of one of
 * them waits until the claim commits, so a claim never marks rows of a shard another relay has
 * taken over, and a takeover's reclaim sees every row the claim marked. Index:
 * idx_shards_owner (the member's rows only). Locks: those rows, shared, until the claim
 * commits (rows whose hold expired are released at once, READ COMMITTED). Params: member.
 */
#define RELAY_SHARD_SQL_HOLD                                                                       \
    "SELECT shard FROM outbox_shards FORCE INDEX (idx_shards_owner) "                              \
    "WHERE owner = ? AND lease_until > NOW(6) ORDER BY shard LOCK IN SHARE MODE"

/*
 * Membership, step 1: the member is alive until now + ttl. Index: PRIMARY. Locks: that row.
 * Params: member, ttl (microseconds).
 */
#define RELAY_SHARD_SQL_HEARTBEAT                                                                  \
    "INSERT INTO outbox_relays (member, seen_until) VALUES (?, NOW(6) + INTERVAL ? MICROSECOND) "  \
    "ON DUPLICATE KEY UPDATE seen_until = VALUES(seen_until)"

/*
 * Step 2: how many members are alive, and how many shards there are. Index: PRIMARY of both
 * (a few rows each). Locks: none (consistent read).
 */
#define RELAY_SHARD_SQL_CENSUS                                                                     \
    "SELECT (SELECT COUNT(*) FROM outbox_relays WHERE seen_until > NOW(6)), "                      \
    "(SELECT COUNT(*) FROM outbox_shards)"

/*
 * Step 3: renews the member's shards; affected rows = the shards it owns. A shard whose lease
 * expired without anyone taking it is still the member's and is renewed (owner unchanged).
 * Index: idx_shards_owner. Locks: those rows. Params: ttl (microseconds), member.
 */
#define RELAY_SHARD_SQL_RENEW                                                                      \
    "UPDATE outbox_shards FORCE INDEX (idx_shards_owner) "                                         \
    "SET lease_until = NOW(6) + INTERVAL ? MICROSECOND WHERE owner = ?"

/*
 * Step 4a, above the fair share: gives back the member's highest shards. Called between
 * batches, so the member has nothing of them in flight. Index: idx_shards_owner. Locks: those
 * rows. Params: member, how many.
 */
#define RELAY_SHARD_SQL_RELEASE                                                                    \
    "UPDATE outbox_shards FORCE INDEX (idx_shards_owner) SET owner = NULL, lease_until = NULL "    \
    "WHERE owner = ? ORDER BY shard DESC LIMIT ?"

/*
 * Step 4b, below the fair share: the free shards (no holder, or a hold that expired), read
 * without locking. Index: PRIMARY (64 rows). Locks: none (consistent read). Params: how many.
 */
#define RELAY_SHARD_SQL_FREE                                                                       \
    "SELECT shard FROM outbox_shards "                                                             \
    "WHERE owner IS NULL OR lease_until IS NULL OR lease_until < NOW(6) ORDER BY shard LIMIT ?"

/*
 * Step 4b, same transaction: takes those that are still free. It waits only for these rows:
 * for the claim of a holder whose hold was valid when its claim began (the claim share-locked
 * the row; it is short), or for another member taking the same shard (then this one finds it
 * held, and takes fewer). Rows are locked in primary key order, as by every other member, so
 * two takers do not deadlock. Index: PRIMARY (id list). Locks: the rows it takes.
 * Params: member, ttl (microseconds), shards...
 */
#define RELAY_SHARD_SQL_TAKE_IN                                                                    \
    "UPDATE outbox_shards SET owner = ?, lease_until = NOW(6) + INTERVAL ? MICROSECOND "           \
    "WHERE (owner IS NULL OR lease_until IS NULL OR lease_until < NOW(6)) AND shard IN "

/*
 * Step 4b, same transaction: the events an earlier holder of the shards just taken left in
 * flight (it died, hung, or lost its hold while publishing) go back to PENDING at once, their
 * lease expiry counted as by RELAY_SQL_RECLAIM_EXPIRED. Their lock token is cleared, so the
 * earlier holder's mark matches nothing; if it wakes and publishes its batch anyway, those are
 * copies of events this member publishes again, in order, from the start (the broker's
 * de-duplication or the consumer's inbox drops them). Only shards this member now holds.
 * Index: idx_outbox_due, the PROCESSING range (the rows in flight), shard computed on each row.
 * Locks: the rows it changes. Params: member, shards...
 */
#define RELAY_SHARD_SQL_RECLAIM_IN                                                                 \
    "UPDATE outbox_events FORCE INDEX (idx_outbox_due) SET status = 'PENDING', "                   \
    "locked_by = NULL, locked_until = NULL, lease_expiries = lease_expiries + 1 "                  \
    "WHERE status = 'PROCESSING' AND shard IN (SELECT s.shard FROM outbox_shards s "               \
    "WHERE s.owner = ?) AND shard IN "

/*
 * Leaving (txo_relay_free): the member's shards become free and its row goes, so the others
 * take the shards at their next tick instead of after the lease. Index: idx_shards_owner,
 * PRIMARY. Locks: those rows. Params: member.
 */
#define RELAY_SHARD_SQL_LEAVE_SHARDS                                                               \
    "UPDATE outbox_shards FORCE INDEX (idx_shards_owner) SET owner = NULL, lease_until = NULL "    \
    "WHERE owner = ?"
#define RELAY_SHARD_SQL_LEAVE_MEMBER "DELETE FROM outbox_relays WHERE member = ?"

/*
 * Housekeeping, in its own statement about once a minute: members gone for an hour are
 * forgotten. Index: idx_relays_seen (only the rows it deletes). Locks: those rows (no live
 * member's).
 */
#define RELAY_SHARD_SQL_FORGET                                                                     \
    "DELETE FROM outbox_relays WHERE seen_until < NOW(6) - INTERVAL 1 HOUR"

#endif
