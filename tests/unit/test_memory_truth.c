/*
 * test_memory_truth.c — em_device_memory tells the truth: after a training loop (nn modules,
 * a loss, backward and an optimizer, on ref and cpu wrapped for autodiff, DISABLED and
 * BALANCED) whose tensors are all released, the device's bytes in use are exactly 0. The
 * core's per-thread cache of tiny buffers is not counted as in use, and
 * em_device_memory_release gives it back too.
 */
#include "errcheck.h"

#include "ember/nn.h"

#define OK(call)                                                                             \
    do {                                                                                     \
        em_status s_ = (call);                                                               \
        if (s_ != EM_OK)                                                                     \
            fail_msg("%s:%d: %s: %s: %s", __FILE__, __LINE__, #call, em_status_name(s_),     \
                     em_last_error());                                                       \
    } while (0)

#define STEPS 20

/* Sequential(Linear(6, 16), ReLU, Linear(16, 3)) trained with Adam on a cross-entropy loss;
 * every tensor, module and optimizer is released at the end. */
static void train(const char *inner_name, em_checkpointing strategy) {
    em_device inner, ad;
    OK(em_device_parse(inner_name, &inner));
    OK(em_device_autodiff(inner, strategy, &ad));
    OK(em_device_memory_release(ad));
    em_memory_stats st;
    OK(em_device_memory(ad, &st));
    /* other tests in this process released everything they made */
    assert_int_equal(st.bytes_in_use, 0);

    em_module_opts opts = em_module_opts_default(ad, 7);
    em_module *mods[3] = {NULL, NULL, NULL}, *net = NULL;
    OK(em_nn_linear(6, 16, true, &opts, &mods[0]));
    OK(em_nn_relu(&mods[1]));
    OK(em_nn_linear(16, 3, true, &opts, &mods[2]));
    OK(em_nn_sequential(mods, 3, &net));
    em_params *params = NULL;
    OK(em_params_create(&params));
    OK(em_module_params(net, "", params));
    em_optimizer *opt = NULL;
    OK(em_optimizer_adam(params, 1e-2, 0.9, 0.999, 1e-8, 0.0, &opt));
    const int64_t xs[2] = {5, 6}, ts[1] = {5};
    const int64_t target[5] = {0, 2, 1, 1, 0};
    em_tensor *x = NULL, *t = NULL;
    OK(em_rand_normal(xs, 2, EM_F32, 0.0, 1.0, 3, ad, &x));
    OK(em_tensor_from_data(target, EM_I64, ts, 1, ad, &t));
    for (int step = 0; step < STEPS; step++) {
        em_tensor *y = NULL, *loss = NULL;
        em_grads *g = NULL;
        OK(em_module_forward(net, x, true, &y));
        OK(em_loss_cross_entropy(y, t, &loss));
        OK(em_backward(loss, &g));
        OK(em_optimizer_step(opt, g, 1.0));
        em_grads_release(g);
        em_tensor_release(loss);
        em_tensor_release(y);
    }
    em_tensor_release(x);
    em_tensor_release(t);
    em_optimizer_release(opt);
    em_params_release(params);
    em_module_release(net);

    OK(em_device_memory(ad, &st));
    if (st.bytes_in_use != 0)
        fail_msg("%s, %s: %zu bytes in use after every tensor was released", inner_name,
                 strategy == EM_CKPT_BALANCED ? "balanced" : "disabled", st.bytes_in_use);
    OK(em_device_memory_release(ad));
    OK(em_device_memory(ad, &st));
    assert_int_equal(st.bytes_in_use, 0);
    assert_int_equal(st.bytes_cached, 0);
}

/* A tiny tensor released into the cache is not in use; releasing the device's cached memory
 * leaves nothing counted at all. */
static void test_tiny_cache(void **state) {
    (void)state;
    static const char *const devs[] = {"ref", "cpu"};
    for (size_t d = 0; d < sizeof devs / sizeof devs[0]; d++) {
        em_device dev;
        OK(em_device_parse(devs[d], &dev));
        OK(em_device_memory_release(dev));
        em_memory_stats st;
        OK(em_device_memory(dev, &st));
        assert_int_equal(st.bytes_in_use, 0);
        const int64_t shape[1] = {3};
        em_tensor *a = NULL, *b = NULL;
        OK(em_full(shape, 1, 2.0, EM_F32, dev, &a));
        OK(em_exp(a, &b));
        OK(em_device_memory(dev, &st));
        assert_true(st.bytes_in_use > 0);
        em_tensor_release(a);
        em_tensor_release(b);
        OK(em_device_memory(dev, &st));
        if (st.bytes_in_use != 0)
            fail_msg("%s: %zu bytes in use after two tiny tensors were released", devs[d],
                     st.bytes_in_use);
        /* a tiny op after the query still runs (the cache refills) */
        OK(em_full(shape, 1, 1.0, EM_F32, dev, &a));
        em_tensor_release(a);
        OK(em_device_memory_release(dev));
        OK(em_device_memory(dev, &st));
        assert_int_equal(st.bytes_in_use, 0);
    }
}

/* A cpu tensor holds at most a quarter more than its bytes (the allocator's classes: four a
 * doubling), for sizes between the powers of two: 288 KiB of f32 took 512 KiB, 2.25 MiB took
 * 3 MiB. */
static void test_cpu_classes_tight(void **state) {
    (void)state;
    em_device cpu;
    OK(em_device_parse("cpu", &cpu));
    static const int64_t counts[] = {1100, 73728, 147456, 300000, 589824, 1000001, 2359296,
                                     5000000};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        em_memory_stats a, b;
        OK(em_device_memory(cpu, &a));
        em_tensor *t = NULL;
        OK(em_zeros(&counts[i], 1, EM_F32, cpu, &t));
        OK(em_device_memory(cpu, &b));
        const double asked = 4.0 * (double)counts[i];
        const double held = (double)(b.bytes_in_use - a.bytes_in_use);
        if (held < asked || held > 1.25 * asked)
            fail_msg("%lld f32: %.0f bytes held for %.0f", (long long)counts[i], held, asked);
        em_tensor_release(t);
    }
}

static void test_train_ref_disabled(void **state) {
    (void)state;
    train("ref", EM_CKPT_DISABLED);
}

static void test_train_ref_balanced(void **state) {
    (void)state;
    train("ref", EM_CKPT_BALANCED);
}

static void test_train_cpu_disabled(void **state) {
    (void)state;
    train("cpu", EM_CKPT_DISABLED);
}

static void test_train_cpu_balanced(void **state) {
    (void)state;
    train("cpu", EM_CKPT_BALANCED);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiny_cache),
        cmocka_unit_test(test_cpu_classes_tight),
        cmocka_unit_test(test_train_ref_disabled),
        cmocka_unit_test(test_train_ref_balanced),
        cmocka_unit_test(test_train_cpu_disabled),
        cmocka_unit_test(test_train_cpu_balanced),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
