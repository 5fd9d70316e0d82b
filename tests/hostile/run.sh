# tests/hostile/run.sh - runs the hostile-input corpus (tests/hostile/cases.sh) through the real
# scdino binary.  Sourced by tests/hostile/hostile_*.sh after tests/lib.sh:
#
#   hostile_run KIND...        run every case of these kinds
#
# Each case gets a fresh directory scratch/<test>/<name> prepared for its kind, then its setup
# command makes the bad input there, then scdino runs on the deck of that kind:
#   deck      the setup writes deck.nml                        scdino deck.nml
#   tiff      tiffs/{A,B}/{1,2}.tif are good 2 x 16 x 16 uint16 images; the setup adds the bad
#             tiffs/B/z.tif                                    calculation='prepare'
#   csv       the same TIFFs and list.csv listing them (path, label, donor); the setup
#             writes a bad list.csv                            calculation='prepare', &data file_list
#   shard     shards/ (manifest.h5, shard-00000.h5) and run/features_0002.h5 from knn_mkdata;
#             the setup damages the shard set                 calculation='knn' with the raw-pixel
#                                                              baseline (reads every image)
#   features  the same fixture; the setup damages the features file   calculation='knn'
#   ckpt      the same fixture plus run/checkpoint.h5 from a 1-step training run (made once per
#             test); the setup damages the checkpoint         calculation='features' (weights)
#   restart   the same                                        calculation='train', restart=.true.
#                                                              (weights, optimizer, centre, position)
# Each kind but deck has a case control_ok: the untouched fixture must run (exit 0), so the other
# cases fail because of their damage and nothing else.
# A case passes when the exit status is the expected one (2 or 3 for a bad input; never a signal
# or a sanitizer report), the output matches the expected regular expression (which names the
# file and what is wrong), and no temporary file is left behind.
#
# Tools on PATH for the setup commands: rawtiff, h5edit (tests/hostile), mktiff, knn_mkdata (tests/fixtures).
# HOSTILE_ONLY=NAME runs one case; HOSTILE_SHOW=1 prints every case's output.

# shellcheck shell=sh
PATH="$top_builddir/tests/hostile:$top_builddir/tests/fixtures:$PATH"
export PATH
hostile_cases="$top_srcdir/tests/hostile/cases.sh"
hostile_kinds=""
hostile_n=0

# Helpers for the setup commands: big inputs are made, not stored.
chars() { head -c "$1" /dev/zero | tr '\000' "$2"; }   # N copies of one character
lines() { yes "$2" | head -n "$1"; }                  # N lines
words() { yes "$2" | head -n "$1" | tr '\n' ' '; }    # N words on one line

# Fixtures shared by the cases of one test (made once, copied per case).
hostile_fixture() {
  fx="$dir/.fixture"
  [ -d "$fx" ] && return 0
  mkdir -p "$fx" || exit 99
  case " $hostile_kinds " in
    *" shard "* | *" features "* | *" ckpt "* | *" restart "*)
      knn_mkdata "$fx" >/dev/null || { echo "knn_mkdata failed"; exit 99; } ;;
  esac
  case " $hostile_kinds " in
    *" tiff "* | *" csv "*)
      mkdir -p "$fx/tiffs/A" "$fx/tiffs/B" || exit 99
      for i in 1 2; do
        mktiff "$fx/tiffs/A/$i.tif" 2 16 16 u16 ramp "$i" && mktiff "$fx/tiffs/B/$i.tif" 2 16 16 u16 ramp $((i + 5)) ||
          { echo "mktiff failed"; exit 99; }
      done
      printf 'path,label,donor\ntiffs/A/1.tif,A,d1\ntiffs/A/2.tif,A,d2\ntiffs/B/1.tif,B,d1\ntiffs/B/2.tif,B,d2\n' \
        >"$fx/list.csv" || exit 99 ;;
  esac
  case " $hostile_kinds " in
    *" ckpt "* | *" restart "*)
      if ! hostile_make_checkpoint "$fx"; then
        hostile_no_ckpt=1
      fi ;;
  esac
}

# A real checkpoint to damage: one training step of a tiny ViT on the fixture's shards.
hostile_make_checkpoint() {
  cat >"$1/train.nml" <<EOF
&control calculation = 'train', run_dir = 'run', verbosity = 0 /
&data shard_dir = 'shards' /
&model arch = 'custom', patch_size = 4, embed_dim = 8, depth = 1, num_heads = 2, out_dim = 16,
  head_hidden_dim = 8, head_bottleneck_dim = 4 /
&crops global_size = 8, local_size = 4, local_crops_number = 1 /
&training epochs = 1, batch_size_per_rank = 4, max_steps = 1, warmup_epochs = 0 /
&system device = 'cpu', loader_threads = 1 /
EOF
  (cd "$1" && "$SCDINO" train.nml >train.out 2>&1) && [ -f "$1/run/checkpoint.h5" ]
}

hostile_deck() { # kind -> the deck for that kind, in the case directory
  case $1 in
    tiff) cat >p.nml <<EOF
&control calculation = 'prepare', run_dir = 'run', verbosity = 0 /
&data tiff_dir = 'tiffs', shard_dir = 'shards', images_per_shard = 4, on_bad_image = 'error' /
EOF
      echo p.nml ;;
    csv) cat >c.nml <<EOF
&control calculation = 'prepare', run_dir = 'run', verbosity = 0 /
&data file_list = 'list.csv', shard_dir = 'shards', images_per_shard = 4 /
EOF
      echo c.nml ;;
    shard) cat >k.nml <<EOF
&control calculation = 'knn', run_dir = 'run', verbosity = 1 /
&data shard_dir = 'shards' /
&knn features = 'run/features_0002.h5', k = 1, 5, baselines = .true., pixel_size = 4 /
EOF
      echo k.nml ;;
    features) cat >k.nml <<EOF
&control calculation = 'knn', run_dir = 'run', verbosity = 0 /
&data shard_dir = 'shards' /
&knn features = 'run/features_0002.h5', k = 1, 5, baselines = .false. /
EOF
      echo k.nml ;;
    ckpt) cat >f.nml <<EOF
&control calculation = 'features', run_dir = 'run', verbosity = 0 /
&data shard_dir = 'shards' /
&model arch = 'custom', patch_size = 4, embed_dim = 8, depth = 1, num_heads = 2, out_dim = 16,
  head_hidden_dim = 8, head_bottleneck_dim = 4 /
&features checkpoint = 'run/checkpoint.h5', resize = 8, subset = 'all' /
&system device = 'cpu' /
EOF
      echo f.nml ;;
    restart) cat >r.nml <<EOF
&control calculation = 'train', run_dir = 'run', verbosity = 0 /
&data shard_dir = 'shards' /
&model arch = 'custom', patch_size = 4, embed_dim = 8, depth = 1, num_heads = 2, out_dim = 16,
  head_hidden_dim = 8, head_bottleneck_dim = 4 /
&crops global_size = 8, local_size = 4, local_crops_number = 1 /
&training epochs = 1, batch_size_per_rank = 4, max_steps = 1, warmup_epochs = 0, restart = .true. /
&system device = 'cpu', loader_threads = 1 /
EOF
      echo r.nml ;;
    deck) echo deck.nml ;;
  esac
}

# The corpus calls this once per case: case_ KIND NAME EXIT REGEX SETUP...
case_() {
  kind=$1 name=$2 want=$3 regex=$4
  shift 4
  case " $hostile_kinds " in *" $kind "*) ;; *) return 0 ;; esac
  [ -n "${HOSTILE_ONLY:-}" ] && [ "$HOSTILE_ONLY" != "$name" ] && return 0
  hostile_n=$((hostile_n + 1))
  if { [ "$kind" = ckpt ] || [ "$kind" = restart ]; } && [ -n "${hostile_no_ckpt:-}" ]; then
    echo "SKIP case $name: no checkpoint could be made (calculation='train' failed)"
    return 0
  fi
  cdir="$dir/$name"
  rm -rf "$cdir" && mkdir -p "$cdir" || exit 99
  [ "$kind" = deck ] || cp -R "$fx/." "$cdir/" || exit 99
  (cd "$cdir" && eval "$*") >"$cdir/setup.log" 2>&1 ||
    { fail "$name: setup failed: $*"; sed 's/^/    | /' "$cdir/setup.log" >&2; return 0; }
  deckfile=$(cd "$cdir" && hostile_deck "$kind")
  before=$(cd "$cdir" && find . -name '*.tmp*' | sort)
  out=$(cd "$cdir" && "$SCDINO" "$deckfile" 2>&1 </dev/null)
  got=$?
  nchecks=$((nchecks + 4))
  [ -n "${HOSTILE_SHOW:-}" ] && printf '== %s (exit %s)\n%s\n' "$name" "$got" "$out" | cut -c1-400
  if [ "$got" != "$want" ]; then
    fail "$name ($kind): exit status $got, wanted $want"
    printf '%s\n' "$out" | head -c 3000 | sed 's/^/    | /' >&2
    return 0
  fi
  if [ -n "$regex" ] && ! printf '%s\n' "$out" | grep -E -q -e "$regex"; then
    fail "$name ($kind): output does not match /$regex/"
    printf '%s\n' "$out" | head -c 3000 | sed 's/^/    | /' >&2
  fi
  if printf '%s\n' "$out" | grep -E -q 'runtime error:|Sanitizer|Segmentation|Aborted|core dumped'; then
    fail "$name ($kind): sanitizer report or crash in the output"
    printf '%s\n' "$out" | head -c 3000 | sed 's/^/    | /' >&2
  fi
  after=$(cd "$cdir" && find . -name '*.tmp*' | sort)
  [ "$after" = "$before" ] || fail "$name ($kind): temporary files left behind: $after"
  # Passed cases leave nothing but their directory name behind (the corpus is regenerated).
  [ "$nfail" = 0 ] && [ -z "${HOSTILE_SHOW:-}" ] && rm -rf "$cdir"
  return 0
}

hostile_run() {
  hostile_kinds="$*"
  # A lone scdino need not start an Open MPI daemon (a third of each run); isolated singletons all
  # use the same session directory name, so each test gets its own base directory.
  OMPI_MCA_ess_singleton_isolated=1
  OMPI_MCA_orte_tmpdir_base="$dir/.ompi"
  mkdir -p "$OMPI_MCA_orte_tmpdir_base" || exit 99
  export OMPI_MCA_ess_singleton_isolated OMPI_MCA_orte_tmpdir_base
  hostile_fixture
  . "$hostile_cases"
  echo "$hostile_n hostile inputs of kind(s) $hostile_kinds run through $SCDINO"
  nchecks=$((nchecks + 1))
  [ "$hostile_n" -gt 0 ] || fail "no cases of kind(s) $hostile_kinds in $hostile_cases"
}
