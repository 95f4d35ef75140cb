// SPDX-License-Identifier: MIT
// The C++ consumer of the install test: fern.hpp through an installed fern.
#include <fern/fern.hpp>

#include <cstdio>
#include <memory>

int main()
{
    fern::channel<std::unique_ptr<int>> ch(4);
    auto producer = fern::spawn([&] {
        for (int i = 1; i <= 6; i++)
            ch.send(std::make_unique<int>(i));
        ch.close();
    });
    auto consumer = fern::spawn([&] {
        int sum = 0;
        for (auto &v : ch)
            sum += *v;
        return sum;  // 21
    });
    producer.join();
    int sum = consumer.join();
    std::printf("fern++ ok %d\n", sum * 2);
    fern::shutdown();
    return 0;
}
