/* version.h - `scdino --version`: version, build options and library versions. */
#ifndef SCDINO_VERSION_H
#define SCDINO_VERSION_H

#include <stdio.h>

void version_print(FILE *f);
/* One line for the start-up log: "scdino X (MPI ..., HDF5 ..., CUDA ...)". */
void version_summary(char *buf, size_t n);

#endif
