// Mesh coordinates and process groups: the groups every collective is issued on.
#include <catch2/catch.hpp>

#include "core/layout/mesh.hpp"

using namespace shardcheck::core;

TEST_CASE("rank <-> coordinates is row-major with the last axis fastest", "[core][mesh]") {
  Mesh m = Mesh::create({{"pp", 2}, {"dp", 4}}).value();
  REQUIRE(m.world_size() == 8);
  REQUIRE(m.coords(5) == std::vector<int>{1, 1});
  for (int r = 0; r < 8; ++r) REQUIRE(m.rank_of(m.coords(r)) == r);
}

TEST_CASE("process group along an axis varies only that axis", "[core][mesh]") {
  Mesh m = Mesh::create({{"pp", 2}, {"dp", 4}}).value();
  REQUIRE(m.group(5, m.axis("dp")) == std::vector<int>{4, 5, 6, 7});
  REQUIRE(m.group(5, m.axis("pp")) == std::vector<int>{1, 5});
  Mesh h = Mesh::create({{"dp_outer", 2}, {"dp_inner", 3}}).value();
  REQUIRE(h.group(4, h.axis("dp_outer")) == std::vector<int>{1, 4});
  REQUIRE(h.group(4, h.axis("dp_inner")) == std::vector<int>{3, 4, 5});
  const int both[] = {0, 1};
  REQUIRE(h.group(4, both) == std::vector<int>{0, 1, 2, 3, 4, 5});
}

TEST_CASE("vpp is a virtual axis: chunks per rank, not ranks", "[core][mesh]") {
  Mesh m = Mesh::create({{"pp", 2}, {"dp", 2}, {"vpp", 2}}).value();
  REQUIRE(m.world_size() == 4);
  REQUIRE(m.virtual_stages() == 2);
  REQUIRE(m.num_axes() == 2);
  REQUIRE(m.describe() == "(pp=2, dp=2, vpp=2)");
}

TEST_CASE("bad meshes are rejected with a reason", "[core][mesh]") {
  auto bad = [](std::vector<Axis> a) { return Mesh::create(std::move(a)).error().message(); };
  REQUIRE_THAT(bad({{"tp", 2}}), Catch::Contains("unknown mesh axis 'tp'"));
  REQUIRE_THAT(bad({{"dp", 0}}), Catch::Contains("sizes must be >= 1"));
  REQUIRE_THAT(bad({{"dp", 2}, {"dp", 2}}), Catch::Contains("appears twice"));
  REQUIRE_THAT(bad({{"dp", 2}, {"dp_outer", 2}, {"dp_inner", 2}}), Catch::Contains("not both"));
  REQUIRE_THAT(bad({{"dp_outer", 2}}), Catch::Contains("come together"));
  REQUIRE_THAT(bad({{"dp", 2}, {"vpp", 2}}), Catch::Contains("needs a 'pp' axis"));
  REQUIRE_THAT(bad({{"pp", 1}, {"dp", 2}, {"vpp", 2}}),
               Catch::Contains("needs a 'pp' axis of 2 or more ranks"));
  REQUIRE_THAT(bad({{"pp", 64}, {"dp", 128}}), Catch::Contains("more than 4096"));
}
