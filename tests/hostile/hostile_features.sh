#!/bin/sh
# tests/hostile/hostile_features.sh - the features cases of the hostile-input corpus (tests/hostile/cases.sh) through
# the real scdino binary: each must end with its exit status and message, never with a crash.
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/hostile/run.sh"
scratch hostile_features
hostile_run features
finish
