// Links against slim_lib.cu's library: prints the host results, an exception thrown by the
// library and caught here, and with "gpu" the kernel's results checked on the device.
#include <cstdio>
#include <cstring>
#include <stdexcept>

extern "C" int slim_version();
extern "C" int slim_table_sum();
extern "C" int slim_catch_inside(int);
extern "C" int slim_run(float*, int, float);
void slim_throw(int);

int main(int argc, char** argv) {
    std::printf("version %d\n", slim_version());
    std::printf("table %d\n", slim_table_sum());
    std::printf("inside %d\n", slim_catch_inside(7));
    try {
        slim_throw(3);
        std::printf("no exception\n");
    } catch (const std::out_of_range& e) {
        std::printf("caught %s\n", e.what());
    }
    if (argc > 1 && std::strcmp(argv[1], "gpu") == 0) {
        static float out[1000];
        int err = slim_run(out, 1000, 2.0f);
        if (err != 0) {
            std::printf("cuda error %d\n", err);
            return 3;
        }
        for (int i = 0; i < 1000; ++i)
            if (out[i] != 2.0f * i + 1.0f) {
                std::printf("wrong at %d: %f\n", i, out[i]);
                return 4;
            }
        std::printf("kernel ok\n");
    }
    return 0;
}
