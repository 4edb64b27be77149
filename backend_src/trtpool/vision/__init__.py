"""An optional toolkit for process files that serve image models; the core never imports it.

    images        encoded images to ImageNet-style normalized crops on the CPU (Pillow), and
                  what the GPU path decides on the host
    device_crops  a batch of encoded images to crops on one GPU: nvJPEG decode, then one kernel
    crop_kernel   that kernel (crop_kernel.cu, compiled with NVRTC at run time) and its launch

Process files import these as trtpool.vision.images and trtpool.vision.device_crops; the names
trtpool.images and trtpool.device_crops, which earlier process files import, are the same modules.
"""
