/* base.h - the map of the base layer: small pieces every layer shares
 *
 * Lock keys, the log, counters and their Prometheus form, a buffer, the
 * one escaper, the mount chain and the clocks: nothing here knows FUSE,
 * an option or a lock store's protocol. This header declares nothing;
 * include the one you need.
 *
 * Files in src/base/:
 *
 *   base.h           this map
 *   buf.[ch]         a growable byte buffer with an optional cap
 *   escape.[ch]      the one escaper for text from users in lines we write
 *   log.[ch]         the one log sink: stderr, or syslog once daemonised
 *   path.[ch]        lock keys: normalisation, ancestors, order, lock ids
 *   stats.[ch]       the lock manager's counters and histograms
 *   metrics.[ch]     the daemon's metrics in Prometheus's text format
 *   mountchain.[ch]  which directories a mount is served from
 *   tlclock.h        the clock readings every module takes
 *
 * Depends on: nothing.
 * Exception: metrics.h uses lock (struct tl_store_metrics, the store's own
 *   counters, which metrics_format() writes).
 */
#ifndef TREELOCKFS_BASE_BASE_H
#define TREELOCKFS_BASE_BASE_H
#endif /* TREELOCKFS_BASE_BASE_H */
