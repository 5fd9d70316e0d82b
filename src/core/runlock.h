/* runlock.h - one job at a time in a run_dir or shard_dir.
 *
 * A job that writes into a directory first creates DIR/.scdino.lock (O_EXCL), holding its host,
 * process id, Slurm job id (when it has one) and start time; it removes the file when it ends, also
 * on a fatal error or a signal (the lock is a registered temporary file).  A second job finds the
 * lock and ends with exit status 2 naming the holder, so it never deletes the first one's files in
 * progress.  A lock left by a job that is gone is taken over with a warning when that can be known:
 * the same host and a process id that no longer runs (within 10 s: an aborted job's processes take
 * a moment to go), or the same Slurm job id (a requeued job).
 * A lock of another host that is not the same Slurm job cannot be checked from here: the message
 * says to remove the file if that job is gone.  Rank 0 only. */
#ifndef SCDINO_RUNLOCK_H
#define SCDINO_RUNLOCK_H

/* Take the lock of dir (created if missing); `what` names the directory in messages ("run_dir").
 * Up to 4 locks may be held at once; taking one already held by this process does nothing. */
void runlock_acquire(const char *dir, const char *what);
/* Give back the lock of dir, if this process holds it. */
void runlock_release(const char *dir);
/* Give back every lock this process holds (also run at exit). */
void runlock_release_all(void);

#endif
