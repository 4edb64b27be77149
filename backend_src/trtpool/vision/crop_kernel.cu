__device__ __forceinline__ float triangle(float x) { x = fabsf(x); return x < 1.0f ? 1.0f - x : 0.0f; }

/* One axis of the antialiased bilinear filter for one output index: the first source index, the
   count of taps, their centre, 1/scale and the sum of their weights (each weight is divided by it). */
struct Axis { int first, count; float centre, inv, total; };

__device__ __forceinline__ float weight(const Axis& a, int k) {
    return triangle((a.first + k - a.centre + 0.5f) * a.inv);
}

__device__ Axis axis(int out, int size_in, int size_out) {
    Axis a;
    float scale = (float)size_in / (float)size_out;
    float support = scale >= 1.0f ? scale : 1.0f;
    a.inv = scale >= 1.0f ? 1.0f / scale : 1.0f;
    a.centre = scale * (out + 0.5f);
    int lo = (int)(a.centre - support + 0.5f);
    a.first = lo > 0 ? lo : 0;
    int hi = (int)(a.centre + support + 0.5f);
    a.count = (hi < size_in ? hi : size_in) - a.first;
    a.total = 0.0f;
    for (int k = 0; k < a.count; ++k) a.total += weight(a, k);
    return a;
}

/* The drafted pixel (row, column), 3 channels: the rounded mean of its a x a block (cut at the
   image's edge), or the pixel itself where a is 1. */
__device__ __forceinline__ void drafted(const unsigned char* __restrict__ src, int row, int column, int a,
                                        int height, int width, long long rs, long long ps, long long cs,
                                        float* p) {
    if (a == 1) {
        const unsigned char* at = src + row * rs + column * ps;
        p[0] = at[0]; p[1] = at[cs]; p[2] = at[2 * cs];
        return;
    }
    int y0 = row * a, x0 = column * a;
    int y1 = min(y0 + a, height), x1 = min(x0 + a, width);
    float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f;
    for (int y = y0; y < y1; ++y) {
        const unsigned char* line = src + y * rs;
        for (int x = x0; x < x1; ++x) {
            const unsigned char* at = line + x * ps;
            s0 += at[0]; s1 += at[cs]; s2 += at[2 * cs];
        }
    }
    float count = (float)((y1 - y0) * (x1 - x0));
    p[0] = rintf(s0 / count); p[1] = rintf(s1 / count); p[2] = rintf(s2 / count);
}

/* table: per image [ptr, H, W, row stride, pixel stride, channel stride, draft, Hd, Wd, Hr, Wr,
   left, top, output row]; grid (ceil(crop*crop / block), images); a thread makes one output
   pixel's 3 channels, each tap's weight computed once for the three. */
extern "C" __global__ void imagenet_crops(const long long* __restrict__ table, int fields,
                                          float* __restrict__ out, int crop,
                                          float scale0, float scale1, float scale2,
                                          float shift0, float shift1, float shift2) {
    const long long* t = table + (long long)blockIdx.y * fields;
    int pixel = blockIdx.x * blockDim.x + threadIdx.x;
    if (pixel >= crop * crop) return;
    int y = pixel / crop, x = pixel % crop;
    const unsigned char* src = (const unsigned char*)t[0];
    int height = (int)t[1], width = (int)t[2], a = (int)t[6];
    long long rs = t[3], ps = t[4], cs = t[5];
    Axis ay = axis(y + (int)t[12], (int)t[7], (int)t[9]);
    Axis ax = axis(x + (int)t[11], (int)t[8], (int)t[10]);
    float acc[3] = {0.0f, 0.0f, 0.0f}, p[3];
    for (int i = 0; i < ay.count; ++i) {
        float wy = weight(ay, i) / ay.total;
        if (wy == 0.0f) continue;
        float line[3] = {0.0f, 0.0f, 0.0f};
        for (int j = 0; j < ax.count; ++j) {
            float wx = weight(ax, j) / ax.total;
            if (wx == 0.0f) continue;
            drafted(src, ay.first + i, ax.first + j, a, height, width, rs, ps, cs, p);
            line[0] += wx * p[0]; line[1] += wx * p[1]; line[2] += wx * p[2];
        }
        acc[0] += wy * line[0]; acc[1] += wy * line[1]; acc[2] += wy * line[2];
    }
    float* o = out + ((long long)t[13] * 3 * crop + y) * crop + x;
    long long plane = (long long)crop * crop;
    o[0] = rintf(fminf(fmaxf(acc[0], 0.0f), 255.0f)) * scale0 - shift0;
    o[plane] = rintf(fminf(fmaxf(acc[1], 0.0f), 255.0f)) * scale1 - shift1;
    o[2 * plane] = rintf(fminf(fmaxf(acc[2], 0.0f), 255.0f)) * scale2 - shift2;
}
