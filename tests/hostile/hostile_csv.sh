#!/bin/sh
# tests/hostile/hostile_csv.sh - the csv cases of the hostile-input corpus (tests/hostile/cases.sh): bad
# &data file_list CSVs through the real scdino binary; each must end with exit status 2 and a message
# naming file:line, before prepare writes anything, never with a crash.
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/hostile/run.sh"
scratch hostile_csv
hostile_run csv
finish
