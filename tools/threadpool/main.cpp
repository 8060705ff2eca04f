#include "common/cli.h"
#include "tools/threadpool/threadpool.h"

int main(int argc, char** argv) {
  return bpfdiag::tool_main<threadpool::Config>("threadpool", threadpool::help_text(), argc, argv,
                                                threadpool::parse_args, threadpool::run);
}
