// tiny_add_torch.cpp — PyTorch's C++ at::add on two 1-element f32 tensors: ns per op, the
// median of rounds. The baseline of ember's tiny-op latency (`ember-bench cpu --tiny`).
// Built by bench/cpu_vs_torch.py against Debian's libtorch-dev.
#include <ATen/ATen.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

int main() {
    at::Tensor a = at::rand({1}), b = at::rand({1});
    const int iters = 200000, rounds = 5;
    std::vector<double> ns;
    for (int i = 0; i < 1000; i++) at::add(a, b);
    for (int r = 0; r < rounds; r++) {
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < iters; i++) {
            at::Tensor c = at::add(a, b);
        }
        auto t1 = std::chrono::steady_clock::now();
        ns.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / iters);
    }
    std::sort(ns.begin(), ns.end());
    std::printf("%.1f\n", ns[ns.size() / 2]);
    return 0;
}
