#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "engine/base/check.h"

namespace quill::engine {

// A queue that is FIFO within each tenant and weighted-fair across tenants: self-clocked
// fair queueing (Golestani 1994) with every item costing one unit. An item pushed by
// tenant t gets the tag max(V, last tag of t's queued items) + 1/weight(t), where V is the
// tag of the item popped last; items leave in tag order, ties in arrival order.
//
// Why tags rather than round-robin pointers: the order is a property of the items, so the
// engine can look at the first n (to plan a step) and pop exactly those, and removing a
// cancelled item anywhere needs no repair. Effect: a tenant that queues 1,000 items while
// another queues 1 delays that one by at most one item per other tenant with queued work;
// with weights 2:1 the first tenant gets two items for each of the other's.
//
// A tenant is forgotten when its last item leaves, so it comes back at V with no credit
// and no debt ("fair among tenants with queued work"). Not thread-safe. `T` is movable.
template <typename T>
class FairQueue {
 public:
  // Largest weight accepted; larger ones are clamped (and 0 or less counts as 1).
  static constexpr int kMaxWeight = 1000;

  // Appends `item` at the back of `tenant`'s queue. The tenant's weight is the one given
  // with its latest push.
  void Push(absl::string_view tenant, int weight, T item) {
    weight = std::clamp(weight, 1, kMaxWeight);
    auto [it, inserted] = tenants_.try_emplace(tenant);
    TenantState& state = it->second;
    state.weight = weight;
    const uint64_t start = std::max(virtual_time_, state.last_tag);
    state.last_tag = start + kUnit / static_cast<uint64_t>(weight);
    ++state.queued;
    items_.emplace(Key{state.last_tag, next_arrival_++},
                   Entry{std::string(tenant), std::move(item)});
  }

  bool empty() const { return items_.empty(); }
  size_t size() const { return items_.size(); }
  // Items `tenant` has queued.
  int queued(absl::string_view tenant) const {
    auto it = tenants_.find(tenant);
    return it == tenants_.end() ? 0 : it->second.queued;
  }
  // Tenants with queued items.
  size_t num_tenants() const { return tenants_.size(); }

  // The first `n` items in the order PopFront would return them (fewer if fewer queued).
  // The pointers stay valid until that item is popped or erased.
  void Head(size_t n, std::vector<T*>* out) {
    out->clear();
    for (auto it = items_.begin(); it != items_.end() && out->size() < n; ++it) {
      out->push_back(&it->second.item);
    }
  }

  // The item with the smallest tag. Must not be empty.
  T PopFront() {
    QUILL_CHECK(!items_.empty());
    auto it = items_.begin();
    virtual_time_ = it->first.tag;
    T item = std::move(it->second.item);
    Forget(it);
    return item;
  }

  // Calls f(item) on every item, in order.
  template <typename F>
  void ForEach(F f) {
    for (auto& [key, entry] : items_) f(entry.item);
  }
  template <typename F>
  void ForEach(F f) const {
    for (const auto& [key, entry] : items_) f(entry.item);
  }

  // Removes every item for which pred(item) returns true (pred may act on it first, e.g.
  // move it out); returns how many. Removal does not move the virtual time.
  template <typename Pred>
  int EraseIf(Pred pred) {
    int erased = 0;
    for (auto it = items_.begin(); it != items_.end();) {
      if (pred(it->second.item)) {
        it = Forget(it);
        ++erased;
      } else {
        ++it;
      }
    }
    return erased;
  }

 private:
  // One unit of cost at weight 1: divisible by every weight up to 16 and by 1000; other
  // weights round down by under one part in 10^6, which no one can notice.
  static constexpr uint64_t kUnit = 720720ull * 1000;

  struct Key {
    uint64_t tag;
    uint64_t arrival;
    bool operator<(const Key& o) const { return tag != o.tag ? tag < o.tag : arrival < o.arrival; }
  };
  struct Entry {
    std::string tenant;
    T item;
  };
  struct TenantState {
    int weight = 1;
    int queued = 0;
    uint64_t last_tag = 0;
  };
  using Items = std::map<Key, Entry>;

  typename Items::iterator Forget(typename Items::iterator it) {
    auto state = tenants_.find(it->second.tenant);
    QUILL_CHECK(state != tenants_.end());
    if (--state->second.queued == 0) tenants_.erase(state);
    return items_.erase(it);
  }

  Items items_;
  absl::flat_hash_map<std::string, TenantState> tenants_;
  uint64_t virtual_time_ = 0;
  uint64_t next_arrival_ = 0;
};

}  // namespace quill::engine
