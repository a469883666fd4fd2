// A separate process for tests that need one: a pool writer they can hold at a point, or one
// that dies without closing. Tests start it with exec, never fork alone: a process forked from a
// test that has used OpenMP hangs in its next parallel region (libgomp's threads are not forked).
//
//   test_child hold POOL           open POOL, insert keys 1001..2000, print "ready", wait for a
//                                  line on stdin, insert 2001..3000, close cleanly
//   test_child die POOL VW N       create POOL (8-byte keys, VW-byte values), insert 1..N, exit
//                                  without closing (the pool stays not shut down cleanly)
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include "gphash/table.h"
#include "test_util.h"

using namespace gphash;
using namespace gphash::testing::batches;

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "hold" && argc == 3) {
      Table t = Table::open(argv[2]);
      run(t, Op::kInsert, key_range(1001, 1000));
      std::cout << "ready" << std::endl;
      std::string line;
      std::getline(std::cin, line);
      run(t, Op::kInsert, key_range(2001, 1000));
      return 0;
    }
    if (mode == "die" && argc == 5) {
      Table t = Table::create(argv[2], {8, static_cast<uint32_t>(std::atoi(argv[3])), {}, 64, 7});
      run(t, Op::kInsert, key_range(1, std::strtoull(argv[4], nullptr, 10)));
      std::fflush(nullptr);
      _exit(0);  // no destructor: the pool stays dirty
    }
  } catch (const std::exception& e) {
    std::cerr << "test_child: " << e.what() << "\n";
    return 1;
  }
  std::cerr << "usage: test_child hold POOL | test_child die POOL VALUE_WIDTH N\n";
  return 2;
}
