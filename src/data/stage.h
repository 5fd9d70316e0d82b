/* stage.h - the shard set copied to node-local disk before training (&data stage_dir).
 *
 * Training reads every shard every epoch (each epoch's permutation spans the whole training split),
 * so each node wants the whole set close by: local rank 0 of every node copies shard_dir's shards
 * and manifest into stage_dir, the other ranks of the node wait, and all of them then read the
 * copy.  A shard already in stage_dir whose size and FNV-1a 64 match the manifest's record (made by
 * prepare) is used as it is - a restart, or a later job on the same node - and one that does not
 * match (unfinished, damaged, another set) is copied again.  Copies go to a temporary name and are
 * checked against the record before they are renamed.  Manifests made before the record existed
 * are checked by size only (warned).  A failure (full disk, a copy that does not verify, an
 * unwritable stage_dir) ends the job naming the file, or with &data stage_fallback = .true. leaves
 * that node reading shard_dir (warned). */
#ifndef SCDINO_STAGE_H
#define SCDINO_STAGE_H

#include <stddef.h>

#include "input/config.h"

/* Collective (every rank).  Stages cfg->data.shard_dir into cfg->data.stage_dir and puts the
 * directory this rank is to read into dir (size n): stage_dir, or shard_dir after a fallback. */
void stage_shards(const struct config *cfg, char *dir, size_t n);

#endif
