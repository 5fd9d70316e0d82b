/* imagefolder.h - the file list of a TIFF tree in torchvision ImageFolder order (or of a whole tree
 * without classes; a CSV file list, data/filelist.h, fills the same struct).
 *
 * Classes are the sorted names of the first-level sub-directories of the root (symbolic links
 * followed).  Within a class, directories are visited in the order of sorted(os.walk(class_dir,
 * followlinks=True)) - sorted by their full path string, not depth first - and the files of each
 * directory in sorted name order.  Sorting is by bytes, which for UTF-8 names is Python's code-point
 * order.  Files ending in .tif or .tiff (any case) are kept. */
#ifndef SCDINO_IMAGEFOLDER_H
#define SCDINO_IMAGEFOLDER_H

#include <stddef.h>
#include <stdint.h>

struct imagefolder {
  int nclasses;      /* 0: unlabelled (every label is -1) */
  char **classes;
  int64_t n;
  char **paths;      /* relative to the root: "class/sub/file.tif" (a file list's: as written, maybe absolute) */
  int32_t *labels;   /* [n]: 0..nclasses-1, or -1 when nclasses is 0 */
  int64_t n_other;   /* files torchvision's ImageFolder would take but that are not TIFF (.png ...) */
  char other_example[4096];
  int from_list;     /* made from a CSV file list (data/filelist.h) */
  int nmeta;         /* metadata columns (a file list's columns beside the path and the label) */
  char **meta_names; /* [nmeta] */
  char **meta;       /* [n][nmeta], row-major: meta[i * nmeta + m] */
};

/* Scan root; a missing root, one without class folders, or a class without TIFF files ends the
 * job (SCD_EXIT_DATA) with the folder named. */
void imagefolder_scan(const char *root, struct imagefolder *f);
/* Every TIFF file under root, recursively, without classes (&data labels = 'none'): the files
 * directly in root first, then the folders in the order of their sorted relative paths (as the walk
 * of a class folder); nclasses 0 and every label -1.  A root without TIFF files ends the job
 * (SCD_EXIT_DATA). */
void imagefolder_scan_all(const char *root, struct imagefolder *f);
void imagefolder_free(struct imagefolder *f);
/* Classes from another folder level (&data folder_depth_for_labels = depth >= 0): each file's
 * class becomes the folder depth levels above it (0: its own folder), the classes the sorted
 * distinct names; the file order stays ImageFolder's.  A file with fewer folders above it under the
 * root returns -1 with why (size n) naming it. */
int imagefolder_relabel(struct imagefolder *f, int depth, char *why, size_t n);
/* FNV-1a 64 over class names and relative paths: "is this the same file list?"; for a file list
 * also over every row's label and the metadata (names and values). */
uint64_t imagefolder_hash(const struct imagefolder *f);
/* Flatten to one buffer and back, for broadcasting from rank 0. */
char *imagefolder_pack(const struct imagefolder *f, size_t *bytes);
void imagefolder_unpack(const char *buf, size_t bytes, struct imagefolder *f);

#endif
