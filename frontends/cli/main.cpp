// gphash: create, inspect, load, run, benchmark, check and repair pools from the command line.
#include "cli.h"

int main(int argc, char** argv) {
  gphash::cli::Cli cli;
  const int status = cli.parse(argc, argv);
  if (status != 0 || cli.done()) return status;
  return cli.execute();
}
