/* hello.c — ember in twenty lines: two tensors on the default device, matmul, add, softmax. */
#include <stdio.h>

#include <ember/ember.h>

#define TRY(call) if ((s = (call)) != EM_OK) goto done

int main(void) {
    const float a_data[6] = {1, 2, 3, 4, 5, 6}, b_data[6] = {1, 0, 0, 1, 1, 1};
    const int64_t a_shape[2] = {2, 3}, b_shape[2] = {3, 2};
    em_device dev = em_device_default(); /* or set EMBER_DEVICE=ref, cpu, ... */
    em_tensor *a = NULL, *b = NULL, *ab = NULL, *twice = NULL, *p = NULL;
    float out[4];
    em_status s;
    TRY(em_tensor_from_data(a_data, EM_F32, a_shape, 2, dev, &a));
    TRY(em_tensor_from_data(b_data, EM_F32, b_shape, 2, dev, &b));
    TRY(em_matmul(a, b, &ab));      /* [2, 3] @ [3, 2] -> [2, 2] */
    TRY(em_add(ab, ab, &twice));
    TRY(em_softmax(twice, -1, &p)); /* along the last dim */
    TRY(em_tensor_to_data(p, out, sizeof out));
    printf("softmax(2 * a @ b) = [[%.4f, %.4f], [%.4f, %.4f]]\n", out[0], out[1], out[2], out[3]);
done:
    if (s != EM_OK) fprintf(stderr, "%s: %s\n", em_status_name(s), em_last_error());
    em_tensor_release(a), em_tensor_release(b), em_tensor_release(ab);
    em_tensor_release(twice), em_tensor_release(p);
    return s == EM_OK ? 0 : 1;
}
