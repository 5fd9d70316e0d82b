/* tests/knn_mkdata.c - write the kNN fixture (DIR/shards and DIR/run/features_0002.h5) for the
 * shell test tests/knn.sh, which runs the scdino binary on it with one and two ranks. */
#include "build_config.h"

#include <stdio.h>

#include "features_io.h"
#include "fsutil.h"
#include "knn_fixture.h"

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: knn_mkdata DIR\n");
    return 2;
  }
  char path[4200];
  snprintf(path, sizeof path, "%s/shards", argv[1]);
  fx_make_shards(path);
  snprintf(path, sizeof path, "%s/run", argv[1]);
  fs_mkdir_p(path);
  struct features f;
  fx_make_features(&f, 84);
  snprintf(path, sizeof path, "%s/run/features_0002.h5", argv[1]);
  features_write(path, &f);
  features_free(&f);
  return 0;
}
