"""The launch matrix shared by the golden tests and the shellcheck/bash -n integration test."""

from __future__ import annotations

from buildkit.launch.plan import LaunchRequest

SLURM_FRAMEWORKS = ("none", "horovod", "ddp", "tf", "ray", "nccl-tests")
FRAMEWORKS_BY_SITE = {
    "twnia2": SLURM_FRAMEWORKS, "neuron": SLURM_FRAMEWORKS, "oci": SLURM_FRAMEWORKS, "tara": SLURM_FRAMEWORKS,
    "local": (*SLURM_FRAMEWORKS, "mindspore"),
}
# What each site needs to pass its rules, and an image its default runtime can run.
SITE_DEFAULTS: dict[str, dict[str, object]] = {
    "twnia2": {"account": "MST108XXX", "image": "/work/TWCC_cntr/pytorch_20.09-py3_horovod.sif"},
    "neuron": {"comment": "pytorch", "image": "/apps/applications/singularity_images/ngc/pytorch_22.03-hd-py3.sif"},
    "oci": {"image": "nvcr.io/nvidia/pytorch:24.06-py3"},
    "tara": {"account": "proj0001", "image": "/tarafs/data/project/proj0001/pytorch.sif"},
    "local": {},
}
COMMAND = ("python3", "train.py", "--epochs", "2")


def default_request(site: str, framework: str) -> LaunchRequest:
    return LaunchRequest(command=COMMAND, framework=framework, **SITE_DEFAULTS[site])  # type: ignore[arg-type]


# Seed guides' own resources (see the README's seed table).
SEED_REQUESTS: dict[str, tuple[str, LaunchRequest]] = {
    "000-twnia2-horovod": ("twnia2", LaunchRequest(
        command=("python", "pytorch_synthetic_benchmark.py", "--batch-size", "256"), framework="horovod", nodes=2,
        tasks_per_node=8, cpus_per_task=4, gpus_per_node=8, time="00:10:00", account="PROJECT_ID",
        partition="gtest", name="Hello_twcc", image="/work/TWCC_cntr/pytorch_20.09-py3_horovod.sif",
        env=(("TF_ENABLE_AUTO_MIXED_PRECISION", "1"), ("NCCL_DEBUG", "INFO")))),
    "001-neuron-horovodrun": ("neuron", LaunchRequest(
        command=("python", "tensorflow2_mnist.py"), framework="horovod", launcher="horovodrun", nodes=2,
        gpus_per_node=2, time="00:30:00", partition="cas_v100_4", comment="tensorflow", name="test_job",
        runtime="none", gloo=True, output="%x.o%j", error="%x.e%j",
        modules=("gcc/10.2.0", "cuda/11.4", "cudampi/openmpi-4.1.1", "python/3.7.1"), conda="my_tensorflow")),
    # the guide's loop: `python main.py -a $config --dist-url tcp://$master_addr:$master_port --dist-backend 'nccl'
    # --multiprocessing-distributed --world-size $SLURM_JOB_NUM_NODES --rank $node_rank`
    "001-neuron-ddp": ("neuron", LaunchRequest(
        command=("python", "main.py", "-a", "config", "--dist-url", "tcp://$MASTER_ADDR:$MASTER_PORT",
                 "--dist-backend", "nccl", "--multiprocessing-distributed", "--world-size", "$SLURM_JOB_NUM_NODES",
                 "--rank", "$NODE_RANK"), framework="ddp", nodes=2, tasks_per_node=1, gpus_per_node=1,
        time="10:00:00", partition="cas_v100_4", comment="pytorch", name="PytorchDDP", runtime="none",
        conda="pytorchDDP", output="%x.o%j", error="%x.e%j")),
    "001-neuron-tf": ("neuron", LaunchRequest(
        command=("python", "tf_multi_keras.py"), framework="tf", nodes=2, gpus_per_node=4, time="01:00:00",
        partition="cas_v100_4", comment="etc", name="tf_multi_test", runtime="none", modules=("python/3.7.1",),
        conda="tf_test", output="./out/%x.o%j", error="./out/%x.e%j")),
    "001-neuron-ray": ("neuron", LaunchRequest(
        command=("python", "examples/mnist_pytorch_trainable.py"), framework="ray", nodes=2, gpus_per_node=2,
        time="00:10:00", partition="cas_v100_4", comment="etc", name="ray_test", runtime="none",
        modules=("gcc/8.3.0", "cuda/10.0", "cudampi/openmpi-3.1.0", "python/3.7.1"), conda="my_ray",
        env=(("PATH", "/home01/${USER}/.local/bin:$PATH"),))),
    "002-oci-nccl-tests": ("oci", LaunchRequest(
        command=("all_reduce_perf", "-b", "10G", "-e", "10G", "-t", "1", "-g", "8"), framework="nccl-tests", nodes=2,
        gpus_per_node=8, name="tensorflow", image="nvcr.io/nvidia/tensorflow:24.06-tf2-py3")),
    "002-oci-tf": ("oci", LaunchRequest(
        command=("python", "/mnt/home/user_name/tensorflow/mnist.py"), framework="tf", nodes=2, gpus_per_node=8,
        name="tensorflow", image="nvcr.io/nvidia/tensorflow:24.06-tf2-py3")),
    "004-tara-ddp": ("tara", LaunchRequest(
        command=("python", "DDP.py"), framework="ddp", nodes=1, gpus_per_node=8, tasks_per_node=8, partition="dgx",
        account="proj0001", name="ddp", runtime="none", time="02:00:00", conda="pytorch",
        fetch=("python -c 'from torchvision import datasets; datasets.MNIST(\"data\", download=True)'",))),
    "004-tara-ddp-2nodes": ("tara", LaunchRequest(
        command=("python", "DDP.py"), framework="ddp", nodes=2, gpus_per_node=8, tasks_per_node=8,
        partition="dgx-preempt", account="proj0001", name="ddp", runtime="none", time="02:00:00")),
}
APULIS_REQUESTS: dict[str, LaunchRequest] = {
    # The guide's Command: `cd ~ && mkdir -p ~/checkpoints && horovodrun -np 16 … python
    # /examples/tensorflow2_keras_mnist.py ~/checkpoints/ ~/tensorboard/${DLWS_JOB_ID}/logs/ && sleep infinity`
    "003-apulis-horovod": LaunchRequest(
        command=("python", "/examples/tensorflow2_keras_mnist.py", "~/checkpoints/",
                 "~/tensorboard/${DLWS_JOB_ID}/logs/"),
        framework="horovod", nodes=2, gpus_per_node=8, name="horovod", pre=("cd ~", "mkdir -p ~/checkpoints"),
        image="apulistech/horovod:0.19.2-tf2.2.0-torch1.5.0-py3.6.9-gpu", endpoints=("ssh", "jupyter", "tensorboard")),
    "003-apulis-horovod-1node": LaunchRequest(
        command=("python", "/examples/tensorflow2_keras_mnist.py", "~/checkpoints/",
                 "~/tensorboard/${DLWS_JOB_ID}/logs/"),
        framework="horovod", nodes=1, gpus_per_node=8, name="horovod", pre=("cd ~", "mkdir -p ~/checkpoints"),
        image="apulistech/horovod:0.19.2-tf2.2.0-torch1.5.0-py3.6.9-gpu"),
    "003-apulis-mindspore": LaunchRequest(
        command=("python", "train.py", "--do_train=True", "--run_distribute=True", "--device_num=$DEVICE_NUM",
                 "--dataset_path=/data/cifar10"), framework="mindspore", nodes=2, devices_per_node=8,
        name="resnet50", image="apulistech/mindspore:0.3.0-withtools", workdir="/data/resnet50_cifar10"),
}


def all_slurm_cases() -> dict[str, tuple[str, LaunchRequest]]:
    cases = {f"{site}-{fw}": (site, default_request(site, fw)) for site, fws in FRAMEWORKS_BY_SITE.items()
             for fw in fws}
    cases["local-podman-ddp"] = ("local", LaunchRequest(command=COMMAND, framework="ddp", runtime="podman",
                                                        image="localhost/busybox:1.36", tasks_per_node=2))
    for fw in ("ddp", "ray"):
        cases[f"local-charliecloud-{fw}"] = ("local", LaunchRequest(
            command=COMMAND, framework=fw, runtime="charliecloud", image="/scratch/images/app.sqsh",
            tasks_per_node=2 if fw == "ddp" else None, mounts=("/data:/mnt/0",), env=(("GREETING", "hello"),)))
    cases["local-mindspore-legacy"] = ("local", LaunchRequest(command=COMMAND, framework="mindspore",
                                                              rank_table="legacy", devices_per_node=4))
    cases["local-mindspore-msrun"] = ("local", LaunchRequest(command=COMMAND, framework="mindspore",
                                                             launcher="msrun", devices_per_node=4))
    cases["neuron-ddp-torchrun"] = ("neuron", LaunchRequest(command=COMMAND, framework="ddp", launcher="torchrun",
                                                            comment="pytorch", runtime="none", nodes=2))
    cases.update(SEED_REQUESTS)
    return cases
