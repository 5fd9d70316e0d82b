#!/bin/sh
# autogen.sh - generate configure and Makefile.in from a git checkout (tarballs ship them).
set -e
cd "$(dirname "$0")"
autoreconf -fi
