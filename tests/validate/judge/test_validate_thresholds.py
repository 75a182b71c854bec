"""Verdict logic on observations in the shape the checks record them."""

from __future__ import annotations

import pytest

from validate.host.nvml_names import BAD_THROTTLE_REASONS, cuda_version_text, throttle_reason_names
from validate.judge.claims import claims_verdict, cudnn_version_text, driver_runs_runtime_verdict
from validate.judge.health import ecc_verdict, throttle_verdict
from validate.judge.memory import (
    cache_holds_verdict,
    cache_released_verdict,
    growth_off_verdict,
    growth_on_verdict,
)
from validate.judge.pcie import (
    host_to_device_verdict,
    pcie_gen_verdict,
    pcie_link_theoretical_gbs,
    pcie_width_verdict,
)
from validate.judge.speed import loss_falls_verdict, throughput_verdict
from validate.judge.verdict import FAIL, INFO, NOT_JUDGED, PASS, SKIP, WARN
from validate.judge.visibility import expected_gpus, gpu_count_verdict, kernel_image_verdict

GIB = 2**30


class TestThroughput:
    def test_unknown_model_is_not_judged_not_failure(self):
        verdict = throughput_verdict("fp32_tflops", 12.0)
        assert verdict.verdict == NOT_JUDGED == "not judged"
        assert not verdict.failed

    def test_confirmed_reference_fails_below_75_percent_and_says_by_how_much(self):
        verdict = throughput_verdict(
            "bf16_tflops", 40.0, reference=59.4, reference_note="torch.matmul bf16 n=8192"
        )
        assert verdict.verdict == FAIL and "40 is below 44.55" in verdict.reason
        assert verdict.threshold == ">= 0.75 x measured reference 59.4 (torch.matmul bf16 n=8192)"
        assert throughput_verdict("bf16_tflops", 45.0, reference=59.4).verdict == PASS

    def test_unconfirmed_reference_warns_and_fails_only_half_speed(self):
        verdict = throughput_verdict("fp32_tflops", 3.5, reference=5.5, confirmed=False)
        assert verdict.verdict == WARN and "unconfirmed reference 5.5" in verdict.threshold
        assert (
            throughput_verdict("fp32_tflops", 2.75, reference=5.5, confirmed=False).verdict == FAIL
        )
        assert (
            throughput_verdict("fp32_tflops", 4.2, reference=5.5, confirmed=False).verdict == PASS
        )

    def test_baseline_wins_over_the_reference(self):
        # Far above the reference floor, but 20% under the known-good server: fails.
        verdict = throughput_verdict("fp32_tflops", 14.0, baseline=17.5, reference=15.0)
        assert verdict.verdict == FAIL
        assert "baseline 17.5" in verdict.threshold
        assert throughput_verdict("fp32_tflops", 15.5, baseline=17.5).verdict == PASS

    def test_metric_without_reference_uses_baseline_only(self):
        assert throughput_verdict("cnn samples/s", 900.0).verdict == NOT_JUDGED
        assert throughput_verdict("cnn samples/s", 900.0, baseline=1000.0).verdict == PASS
        assert throughput_verdict("cnn samples/s", 800.0, baseline=1000.0).verdict == FAIL


class TestPcie:
    def test_link_bandwidth_table(self):
        assert pcie_link_theoretical_gbs(4, 16) == pytest.approx(31.5, rel=1e-3)
        assert pcie_link_theoretical_gbs(5, 16) == pytest.approx(63.0, rel=1e-3)
        assert pcie_link_theoretical_gbs(None, 16) is None

    def test_pinned_copy_on_gen4_x16(self):
        assert host_to_device_verdict(24.8, 4, 16).verdict == PASS
        slow = host_to_device_verdict(6.1, 4, 16)
        assert slow.verdict == FAIL and "pinned host-to-device" in slow.reason

    def test_unknown_link_is_no_reference(self):
        assert host_to_device_verdict(24.8, None, None).verdict == NOT_JUDGED

    def test_width_degraded(self):
        assert pcie_width_verdict(16, 16, under_load=True).verdict == PASS
        verdict = pcie_width_verdict(8, 16, under_load=True)
        assert verdict.verdict == FAIL and "x8" in verdict.reason
        assert pcie_width_verdict(None, 16).verdict == SKIP

    def test_width_at_idle_is_not_judged(self):
        """Links narrow at idle: a narrow idle reading is information, never a fault."""
        idle = pcie_width_verdict(8, 16)
        assert idle.verdict == INFO and "at idle" in idle.reason

    @pytest.mark.parametrize(
        ("platform", "under_load", "gpu_max", "slot_max", "verdict"),
        [
            ("Gen4 card (L40S, A100 PCIe) in a Gen3 host", 3, 4, 3, INFO),
            ("GB200: gen5 of device max 6", 5, 6, 5, INFO),
            ("H100 SXM at its own gen5", 5, 5, 5, PASS),
            ("Gen4 card trained to gen3 in a Gen4 slot", 3, 4, 4, FAIL),
            ("Gen4 card in a Gen3 host, trained to gen2", 2, 4, 3, FAIL),
        ],
    )
    def test_generation_against_the_platform(
        self, platform, under_load, gpu_max, slot_max, verdict
    ):
        assert pcie_gen_verdict(under_load, gpu_max, slot_max).verdict == verdict, platform

    def test_as_built_x8_slot_passes_with_a_note(self):
        """AWS g4dn (T4) and g6e (L40S) slots are x8: NVML's maximum is then x8 (GPU and slot)."""
        verdict = pcie_width_verdict(8, 8, under_load=True)
        assert verdict.verdict == PASS and "as built" in verdict.reason


class TestHealth:
    def test_ecc(self):
        assert ecc_verdict(0).verdict == PASS
        assert ecc_verdict(3).verdict == FAIL
        assert ecc_verdict(None).verdict == SKIP

    def test_throttle_reasons_from_nvml_mask(self):
        assert throttle_reason_names(0x1) == ["gpu_idle"]
        assert throttle_reason_names(0x4 | 0x40) == ["sw_power_cap", "hw_thermal_slowdown"]
        assert throttle_reason_names(0x1000) == ["0x1000"]
        assert throttle_verdict(["gpu_idle"], BAD_THROTTLE_REASONS).verdict == PASS
        hot = throttle_verdict(["sw_power_cap", "hw_thermal_slowdown"], BAD_THROTTLE_REASONS)
        assert hot.verdict == FAIL and hot.reason == "clocks held down by hw_thermal_slowdown"

    def test_cuda_version_encoding(self):
        assert cuda_version_text(12040) == "12.4"
        assert cuda_version_text(11080) == "11.8"


class TestMemory:
    def test_tensorflow_growth_on_holds_little(self):
        # TF with growth on, one 512x512 matmul: about 0.4 GiB (context + pool) of 80 GiB.
        assert growth_on_verdict(int(0.42 * GIB), 80 * GIB).verdict == PASS
        # Growth silently off: TF mapped 76 GiB.
        assert growth_on_verdict(76 * GIB, 80 * GIB).verdict == FAIL

    def test_tensorflow_growth_off_maps_most_free_memory(self):
        assert growth_off_verdict(int(75.9 * GIB), 79 * GIB).verdict == PASS
        failed = growth_off_verdict(int(0.4 * GIB), 79 * GIB)
        assert failed.verdict == FAIL and "not seeing it" in failed.reason

    def test_torch_cache_keeps_then_releases(self):
        assert cache_holds_verdict(2 * GIB, 2 * GIB).verdict == PASS
        assert cache_holds_verdict(0, 2 * GIB).verdict == FAIL
        assert cache_released_verdict(int(0.5 * GIB), int(0.5 * GIB), 2 * GIB).verdict == PASS
        assert cache_released_verdict(int(2.5 * GIB), int(0.5 * GIB), 2 * GIB).verdict == FAIL


class TestKernelImage:
    TORCH_CU121 = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]

    @pytest.mark.parametrize("capability", ["7.0", "7.5", "8.0", "8.6", "8.9", "9.0"])
    def test_covered(self, capability):
        assert kernel_image_verdict(capability, self.TORCH_CU121).verdict == PASS

    def test_newer_gpu_than_the_build_says_no_kernel_image(self):
        verdict = kernel_image_verdict("10.0", self.TORCH_CU121)
        assert verdict.verdict == FAIL
        assert verdict.reason.startswith("no kernel image for sm_100")

    def test_old_gpu_dropped_from_build(self):
        assert kernel_image_verdict("3.7", ["sm_50", "sm_60"]).verdict == FAIL

    def test_ptx_jits_forward(self):
        assert kernel_image_verdict("9.0", ["sm_70", "compute_80"]).verdict == PASS
        assert kernel_image_verdict("7.5", ["compute_80"]).verdict == FAIL

    def test_arch_specific_cubin_only_on_its_own_gpu(self):
        assert kernel_image_verdict("9.0", ["sm_90a"]).verdict == PASS
        assert kernel_image_verdict("10.0", ["sm_90a"]).verdict == FAIL
        assert kernel_image_verdict("8.9", ["sm_80"]).verdict == PASS  # same major, higher minor


class TestDriverAndClaims:
    def test_driver_supports_runtime(self):
        assert driver_runs_runtime_verdict("12.4", "12.1").verdict == PASS
        minor = driver_runs_runtime_verdict("12.2", "12.4")
        assert minor.verdict == PASS and "minor-version compatibility" in minor.reason
        old = driver_runs_runtime_verdict("11.4", "12.1")
        assert old.verdict == FAIL and "update the driver" in old.reason
        assert driver_runs_runtime_verdict(None, "12.1").verdict == SKIP

    def test_nccl_version_text(self):
        from validate.measure.probe import nccl_version_text

        assert nccl_version_text((2, 18, 1)) == "2.18.1"
        assert nccl_version_text(2708) == "2.7.8"

    def test_cudnn_version_text(self):
        assert cudnn_version_text(8902) == "8.9.2"
        assert cudnn_version_text(90100) == "9.1.0"
        assert cudnn_version_text(None) is None

    def test_claims_match(self):
        claimed = {"framework_version": "2.5.1", "cuda": "12.1", "cudnn": "9.1"}
        installed = {"framework_version": "2.5.1+cu121", "cuda": "12.1", "cudnn": "9.1.0"}
        assert claims_verdict(claimed, installed).verdict == PASS

    def test_claims_mismatch_names_each_difference(self):
        claimed = {"framework_version": "2.5.1", "cuda": "12.4", "cudnn": None}
        installed = {"framework_version": "2.4.0+cu121", "cuda": "12.1", "cudnn": "9.1.0"}
        verdict = claims_verdict(claimed, installed)
        assert verdict.verdict == FAIL
        assert "framework 2.4.0+cu121 installed, image claims 2.5.1" in verdict.reason
        assert "built for CUDA 12.1, image claims 12.4" in verdict.reason

    def test_cpu_claim(self):
        assert (
            claims_verdict(
                {"framework_version": "2.13.0", "cuda": "cpu"},
                {"framework_version": "2.13.0+cpu", "cuda": None},
            ).verdict
            == PASS
        )
        assert claims_verdict({"cuda": "cpu"}, {"cuda": "12.1"}).verdict == FAIL


class TestExpectations:
    def test_option_wins(self):
        expectation = expected_gpus(2, "all")
        assert expectation is not None and expectation.count == 2 and expectation.exact
        assert expected_gpus(0, "all") is None

    @pytest.mark.parametrize("value", [None, "", "void", "none", "NONE"])
    def test_no_gpus_asked(self, value):
        assert expected_gpus(None, value) is None

    def test_nvidia_visible_devices(self):
        everything = expected_gpus(None, "all")
        assert everything is not None and everything.count == 1 and not everything.exact
        listed = expected_gpus(None, "0,2")
        assert listed is not None and listed.count == 2 and listed.exact

    def test_cpu_stack_image_does_not_ask_for_gpus(self):
        # gpuenv images set NVIDIA_VISIBLE_DEVICES=all for every stack, CPU ones included.
        assert expected_gpus(None, "all", cpu_stack=True) is None
        assert expected_gpus(1, "all", cpu_stack=True) is not None

    def test_count_verdicts(self):
        assert gpu_count_verdict(0, None, "NVML").verdict == SKIP
        assert gpu_count_verdict(4, None, "NVML").verdict == PASS
        expect1 = expected_gpus(1, None)
        failed = gpu_count_verdict(0, expect1, "PyTorch")
        assert failed.verdict == FAIL
        assert failed.reason == "PyTorch sees 0 GPU(s), expected exactly 1 GPU(s) (--expect-gpus 1)"
        assert gpu_count_verdict(8, expected_gpus(None, "all"), "NVML").verdict == PASS


def test_loss_falls():
    assert loss_falls_verdict(2.31, 0.28).verdict == PASS
    flat = loss_falls_verdict(2.31, 2.29)
    assert flat.verdict == FAIL and "does not learn" in flat.reason


class TestPeers:
    """Sustained figures of same-model GPUs loaded at the same time (issue 17 item 8)."""

    def test_the_odd_gpu_out_fails_and_the_others_pass(self):
        from validate.judge.speed import peer_verdict

        figures = [690.0, 702.0, 695.0, 410.0, 688.0, 699.0, 701.0, 693.0]  # GPU 3 throttles
        verdicts = [peer_verdict(f, figures) for f in figures]
        assert [v.verdict for v in verdicts] == [PASS, PASS, PASS, FAIL, PASS, PASS, PASS, PASS]
        assert "median 694 of 8 same-model GPUs" in verdicts[3].threshold

    def test_one_gpu_has_no_peers(self):
        from validate.judge.speed import peer_verdict

        assert peer_verdict(100.0, [100.0]).verdict == NOT_JUDGED
