// Power-failure emulation for the CPU engine (shadow_memory.h): the engine runs the crash
// workload with ShadowMemory as its Memory; at sampled moments (counted in stores, denser while
// a resize or a displacement move is under way, and, in crash-point builds, at every named crash
// point) the test takes the persisted image and the stores not yet covered by a persist barrier,
// builds crash images that keep some of those stores and lose the rest, and checks that the
// production engine recovers every image to a state the acknowledged batches and the batch in
// flight allow (verifier.h). Then recovery itself runs under ShadowMemory on some of those images
// and is crashed the same way: recovering the result must still give an allowed state.
//
// Also checked after every batch: no store is still unpersisted when execute() returns, since
// the batch is acknowledged then (pmemcheck's "non-durable store" check).
//
// HMEH runs here too, through the same seam. Its Cross-KV insert relies on what x86 guarantees
// for one cache line (a line is written back whole, with the stores made to it so far), so its
// crash images keep per-line prefixes (kLines); the per-word model, which lets any word of a line
// persist without the others, is more adversarial than that hardware and would tear Cross-KV
// slots by construction. HMEH's plain protocol (value and key persisted before the state word)
// is run under both models.
//
// Environment: GPHASH_LOST_STORE_IMAGES (crash images per configuration, default 600),
// GPHASH_CRASH_SEED (default 1).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <random>

#include "engines/common/crash_point.h"
#include "engines/common/dispatch.h"
#include "engines/cpu/cpu_engine_impl.h"
#include "gphash/table.h"
#include "indexes/hmeh/hmeh_engine.h"
#include "harness.h"
#include "shadow_memory.h"

namespace gphash::crashtest {
namespace {

struct LostCase {
  const char* name;
  uint32_t key_width, value_width;
  const char* shape;     // GPHash; nullptr: an HMEH pool (4 KiB segments)
  bool cross_kv = true;  // HMEH's insert protocol
};
// GPHash: every key width, inline values (of 8 and fewer bytes) and heap values, every shape.
// HMEH: both key widths, inline and heap values, both insert protocols.
const LostCase kCases[] = {
    {"k8_v8_2L2H8S", 8, 8, "2L-2H-8S"},       {"k16_v40_4L2H4S", 16, 40, "4L-2H-4S"},
    {"k32_v128_1L4H8S", 32, 128, "1L-4H-8S"}, {"k8_v24_1L4H8S", 8, 24, "1L-4H-8S"},
    {"k16_v4_2L2H8S", 16, 4, "2L-2H-8S"},     {"k32_v8_4L2H4S", 32, 8, "4L-2H-4S"},
    {"hmeh_k8_v8", 8, 8, nullptr},            {"hmeh_k16_v40", 16, 40, nullptr},
    {"hmeh_k16_v8_plain", 16, 8, nullptr, false},
};
bool is_hmeh(const LostCase& c) { return c.shape == nullptr; }

std::unique_ptr<engine::Engine> make_shadow_engine(pool::Pool& pool, const LostCase& c) {
  const format::PoolHeader& h = pool.header();
  if (h.index_kind == format::kIndexHmeh) {
    hmeh::EngineOptions options;
    options.threads = 1;
    options.cross_kv = c.cross_kv;
    if (h.hmeh.key_width == 8) return std::make_unique<hmeh::HmehEngine<8, ShadowMemory>>(pool, options);
    return std::make_unique<hmeh::HmehEngine<16, ShadowMemory>>(pool, options);
  }
  OpenOptions options;
  options.threads = 1;  // one thread: the store order, and so every crash image, is reproducible
  options.max_load_factor = 0.95;  // as crash_child: the workload displaces items, so moves are imaged
  return engine::dispatch(format::shape_of(h), h.gphash.key_width, [&]<class S, int K>() -> std::unique_ptr<engine::Engine> {
    return std::make_unique<engine::cpu::CpuEngine<S, K, ShadowMemory>>(pool, options);
  });
}

// Checks crash images of snapshots against an expectation; keeps counts for the summary.
class ImageChecker {
 public:
  ImageChecker(std::string dir_tag, uint64_t seed)
      : image_path_(fmt::format("/dev/shm/gphash-lost-{}-{}-image", getpid(), dir_tag)), rng_(seed) {
    verify_.open.threads = 1;
    verify_.clean_reopen = false;
  }
  ~ImageChecker() { remove_pool_and_leftovers(image_path_); }

  // Verifies up to `words` images in the per-word model and `lines` in the per-line model.
  // Returns false (with `failure` set) at the first image that does not recover correctly.
  bool check(const ShadowRecorder& recorder, const Snapshot& s, const Expectation& expect, size_t words, size_t lines,
             const std::string& context) {
    for (ImageMode mode : {ImageMode::kWords, ImageMode::kLines}) {
      const size_t budget = mode == ImageMode::kWords ? words : lines;
      if (budget == 0) continue;
      for (const std::vector<uint32_t>& choice : image_choices(s, mode, budget, rng_)) {
        write_image(s, mode, choice, image_path_);
        const VerifyReport v = verify_pool(image_path_, expect, verify_);
        ++images_;
        ++by_label_[s.label];
        if (!v.ok()) {
          failure_ = fmt::format("{}: crash after store {} ({}), {} model, the image keeps:\n{}{}", context,
                                 s.store_index, s.label, mode == ImageMode::kWords ? "per-word" : "per-line",
                                 describe_choice(recorder, s, mode, choice), v.summary());
          return false;
        }
      }
    }
    return true;
  }
  // Keeps an image for recovery-under-emulation: a random choice of a snapshot in `mode`, as a file.
  std::string keep_image(const Snapshot& s, ImageMode mode, const std::string& suffix) {
    std::vector<uint32_t> latest;
    std::mt19937_64 r(rng_());
    for (const auto& c : image_choices(s, mode, 1 << 20, r)) {
      latest = c;
      if (r() % 2) break;
    }
    const std::string path = image_path_ + suffix;
    write_image(s, mode, latest, path);
    return path;
  }
  uint64_t images() const { return images_; }
  const std::map<std::string, uint64_t>& by_label() const { return by_label_; }
  const std::string& failure() const { return failure_; }

 private:
  std::string image_path_;
  std::mt19937_64 rng_;
  VerifyOptions verify_;
  uint64_t images_ = 0;
  std::map<std::string, uint64_t> by_label_;
  std::string failure_;
};

// Snapshots of one batch, taken from the store hook and (crash-point builds) the point observer.
struct Sampler {
  const pool::Pool* pool = nullptr;
  ShadowRecorder* recorder = nullptr;
  std::mt19937_64 rng{1};
  double base_rate = 0.05;    // per store, in ordinary operations
  double special_rate = 0.3;  // per store while a resize or a move is under way
  size_t cap = 40;            // store snapshots per batch
  size_t point_cap = 30;      // snapshots per crash point over the whole run
  std::string prefix;         // of the snapshots' labels
  std::vector<Snapshot> snapshots;
  size_t store_snapshots = 0;  // of this batch
  std::map<std::string, size_t> per_point;

  void start_batch() {
    snapshots.clear();
    store_snapshots = 0;
  }
  void on_store() {
    // GPHash's resize and move leave traces in the pool; HMEH's splits are caught at their points.
    const bool gphash = pool->header().index_kind == format::kIndexGphash;
    const bool resizing = gphash && pool->header().gphash.resize_state != format::kResizeNone;
    const bool moving =
        gphash && engine::cpu::DirectMemory::load(&pool->maintenance()->move_state) == format::kMoveInProgress;
    const double rate = resizing || moving ? special_rate : base_rate;
    if (store_snapshots < cap && std::uniform_real_distribution<double>(0, 1)(rng) < rate) {
      ++store_snapshots;
      snapshots.push_back(recorder->snapshot(prefix + (resizing ? "store during resize"
                                                       : moving ? "store during move"
                                                                : "store")));
    }
  }
  // A named crash point: the first hits of each, then one in four, up to point_cap.
  void on_point(const char* name) {
    size_t& n = per_point[name];
    if (n < point_cap && (n < 4 || rng() % 4 == 0)) {
      ++n;
      snapshots.push_back(recorder->snapshot(prefix + "point " + name));
    }
  }
};
Sampler* g_sampler = nullptr;

#if GPHASH_CRASH_POINTS
void observe_point(int index) {
  if (g_sampler) g_sampler->on_point(crash::kPoints[index].name);
}
#endif

// Images per named crash point over all configurations run in this process (for the summary).
std::map<std::string, uint64_t>& point_images() {
  static std::map<std::string, uint64_t> m;
  return m;
}

class LostStoreTest : public ::testing::TestWithParam<LostCase> {};

TEST_P(LostStoreTest, CrashImagesWithUnflushedStoresLostRecoverAcknowledgedState) {
  const LostCase c = GetParam();
  const uint64_t seed = static_cast<uint64_t>(env_int("GPHASH_CRASH_SEED", 1));
  // Images per configuration; a fifth of them go to recoveries run under emulation.
  const uint64_t image_budget = static_cast<uint64_t>(env_int("GPHASH_LOST_STORE_IMAGES", 3000));
  const uint64_t recovery_budget = image_budget / 5;
  const auto t0 = std::chrono::steady_clock::now();
  WorkloadParams params;
  params.key_width = c.key_width;
  params.value_width = c.value_width;
  params.key_space_start = 48;
  params.key_space_doubling = 12;
  params.key_space_max = 1600;
  params.max_batch_ops = 200;
  const std::string path = fmt::format("/dev/shm/gphash-lost-{}-{}", getpid(), c.name);
  remove_pool_and_leftovers(path);
  // Images per snapshot in the per-word and the per-line model (see the top of this file).
  const size_t word_images = is_hmeh(c) && c.cross_kv ? 0 : 6, line_images = is_hmeh(c) && c.cross_kv ? 6 : 2;
  {
    TableConfig config;
    config.key_width = c.key_width;
    config.value_width = c.value_width;
    if (is_hmeh(c)) {
      config.index = IndexKind::kHmeh;
      config.hmeh.segment_bytes = 4096;
    } else {
      config.shape = parse_shape(c.shape);
    }
    config.capacity = 24;
    config.hash_seed = seed;
    Table::create(path, config).close();
  }
  auto pool = pool::Pool::open(path, {});
  ShadowRecorder recorder(*pool);
  ShadowRecorder::current = &recorder;
  auto engine = make_shadow_engine(*pool, c);

  ImageChecker checker(c.name, seed);
  Sampler sampler;
  sampler.pool = pool.get();
  sampler.recorder = &recorder;
  sampler.rng.seed(seed * 7919 + c.key_width);
  recorder.set_store_hook([&](uint64_t) { sampler.on_store(); });
  g_sampler = &sampler;
#if GPHASH_CRASH_POINTS
  crash::set_observer(&observe_point);
#endif

  CrashModel model(c.value_width);
  uint64_t key_space = 0, batches = 0, snapshots = 0, recovery_images = 0, recovery_runs = 0;
  BatchBuffers buffers;
  // Batches until the image budget is spent or the key space has been full for a while.
  for (uint64_t b = 0; b < 90 && checker.images() < image_budget; ++b) {
    const std::vector<PlannedOp> plan = plan_batch(params, seed, b);
    fill_buffers(params, plan, buffers);
    for (const PlannedOp& op : plan) key_space = std::max(key_space, op.record + 1);
    const CrashModel before = model;
    sampler.start_batch();
    engine->execute(buffers.batch(params));
    ++batches;

    // Acknowledged now: nothing may be left unpersisted.
    const std::vector<PendingStore> pending = recorder.pending();
    for (const PendingStore& s : pending)
      ADD_FAILURE() << c.name << " batch " << b << ": store #" << s.sequence << " to " << recorder.describe(s.offset)
                    << " is not persisted when execute() returns";
    ASSERT_TRUE(pending.empty());
    for (size_t i = 0; i < plan.size(); ++i) {
      uint64_t seen = 0;
      const OpStatus want = model.apply(plan[i], &seen);
      ASSERT_EQ(buffers.status[i], want) << c.name << " batch " << b << " op " << i;
    }

    // Crash images of the moments sampled during the batch.
    ShadowRecorder::current = nullptr;  // the checks below run the production engine only
    g_sampler = nullptr;
    const Expectation expect{&before, key_space, &plan};
    for (const Snapshot& s : sampler.snapshots) {
      if (checker.images() >= image_budget) break;
      ++snapshots;
      const std::string context = fmt::format("{} batch {}", c.name, b);
      ASSERT_TRUE(checker.check(recorder, s, expect, word_images, line_images, context)) << checker.failure();

      // Recovery under emulation, for crashes inside a resize or move (recovery has work then)
      // and for one ordinary snapshot in ten: crash the recovery at sampled stores, recover again.
      const bool special = s.label != "store";
      if ((!special && snapshots % 10 != 0) || recovery_images >= recovery_budget) continue;
      const std::string image = checker.keep_image(s, word_images ? ImageMode::kWords : ImageMode::kLines, ".recovering");
      {
        auto crashed = pool::Pool::open(image, {});
        ShadowRecorder during(*crashed);
        Sampler rs;
        rs.pool = crashed.get();
        rs.recorder = &during;
        rs.rng.seed(snapshots);
        rs.base_rate = 0.1;
        rs.special_rate = 0.5;
        rs.cap = 8;
        rs.prefix = "recovery: ";
        during.set_store_hook([&](uint64_t) { rs.on_store(); });
        ShadowRecorder::current = &during;
        g_sampler = &rs;
        std::unique_ptr<engine::Engine> recovering = make_shadow_engine(*crashed, c);
        g_sampler = nullptr;
        ShadowRecorder::current = nullptr;
        ++recovery_runs;
        for (const PendingStore& p : during.pending())
          ADD_FAILURE() << context << ": recovery left store #" << p.sequence << " to " << during.describe(p.offset)
                        << " unpersisted when the open returned";
        const uint64_t images_before = checker.images();
        for (const Snapshot& rsnap : rs.snapshots)
          ASSERT_TRUE(checker.check(during, rsnap, expect, word_images / 2, (line_images + 1) / 2,
                                    context + ", crash during its recovery"))
              << checker.failure();
        recovery_images += checker.images() - images_before;
        recovering->close();
      }
      remove_pool_and_leftovers(image);
    }
    ShadowRecorder::current = &recorder;
    g_sampler = &sampler;
  }
#if GPHASH_CRASH_POINTS
  crash::set_observer(nullptr);
#endif
  g_sampler = nullptr;
  recorder.set_store_hook(nullptr);
  engine->close();
  engine.reset();
  ShadowRecorder::current = nullptr;
  pool.reset();
  remove_pool_and_leftovers(path);

  // Images by moment: at sampled stores (ordinary, inside a resize, inside a move), at named
  // crash points (crash-point builds), during recovery; per point only the range is printed.
  std::map<std::string, uint64_t> kinds;
  std::map<std::string, uint64_t> per_point;
  for (const auto& [label, n] : checker.by_label()) {
    const bool recovery = label.rfind("recovery: ", 0) == 0;
    const std::string rest = recovery ? label.substr(10) : label;
    if (rest.rfind("point ", 0) == 0) {
      per_point[rest] += n;
      kinds[recovery ? "recovery at points" : "at points"] += n;
    } else {
      kinds[(recovery ? "recovery " : "") + rest] += n;
    }
  }
  std::string by_kind;
  for (const auto& [kind, n] : kinds) by_kind += fmt::format("{}{} {}", by_kind.empty() ? "" : ", ", n, kind);
  uint64_t lo = ~uint64_t{0}, hi = 0;
  for (const auto& [point, n] : per_point) lo = std::min(lo, n), hi = std::max(hi, n);
  fmt::print(
      "[lost_store_test] {}: {} batches, {} stores, {} crash images verified in {:.1f} s ({} from {} recoveries "
      "run under emulation); images: {}{}\n",
      c.name, batches, recorder.stores(), checker.images(),
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), recovery_images, recovery_runs,
      by_kind,
      per_point.empty() ? std::string()
                        : fmt::format("; {} named points, {}..{} images each", per_point.size(), lo, hi));
  for (const auto& [point, n] : per_point) point_images()[point] += n;
}

INSTANTIATE_TEST_SUITE_P(Configurations, LostStoreTest, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<LostCase>& i) { return std::string(i.param.name); });

#if GPHASH_CRASH_POINTS
// Prints, after the configurations above, how many crash images each named point got in total.
class PointSummary : public ::testing::Environment {
 public:
  void TearDown() override {
    if (point_images().empty()) return;
    std::string line;
    for (const auto& [point, n] : point_images())
      line += fmt::format("{}{} {}", line.empty() ? "" : ", ", point.substr(6), n);
    fmt::print("[lost_store_test] crash images per named point (workload and recovery, all configurations): {}\n",
               line);
  }
};
const auto* const kPointSummary = ::testing::AddGlobalTestEnvironment(new PointSummary);
#endif

}  // namespace
}  // namespace gphash::crashtest
