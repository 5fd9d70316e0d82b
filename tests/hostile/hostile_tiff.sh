#!/bin/sh
# tests/hostile/hostile_tiff.sh - the tiff cases of the hostile-input corpus (tests/hostile/cases.sh) through
# the real scdino binary: each must end with its exit status and message, never with a crash.
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/hostile/run.sh"
scratch hostile_tiff
hostile_run tiff
finish
