#!/bin/sh
# builds the prototypes against the worktree's libcommon.a (build/ must exist)
set -e
cd "$(dirname "$0")"
B=../../../build
g++ -O2 -g -std=c++17 -o ehtab ehtab.cpp ehtab_main.cpp -ldw -lelf
g++ -O2 -g -std=c++17 -DSRC_DIR="\"$(pwd)\"" -I../../.. -I../../../bpf_sources -isystem /usr/include/bcc -o uwproto uwproto.cpp ehtab.cpp \
  $B/libcommon.a -lbcc -lbpf -ldw -lelf -lpthread
g++ -O2 -fomit-frame-pointer -g -o pingpong pingpong.cpp -lpthread
