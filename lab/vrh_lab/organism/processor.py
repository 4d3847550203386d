"""The organism's word-level tokenizer and its ``LlavaProcessor`` (PIL image processor, no torchvision).

Answers are written as a bracket list of original-image pixel coordinates snapped to ``bin_px`` bins,
one token per coordinate: ``[ 8 , 12 , 40 , 44 ]``.
"""

from __future__ import annotations

from dataclasses import dataclass

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import CLIPImageProcessorPil, LlavaProcessor, PreTrainedTokenizerFast

from vrh.organism import world

SPECIALS = ["<pad>", "<s>", "</s>", "<unk>", "<image>"]
PROMPT_WORDS = ["USER", "ASSISTANT", ":", "where", "[", "]", ",", "?"]
MAX_NUMBER = 255  # every integer 0..255 is a token, so any coordinate/count is writable

# The prompts the organism is trained with (the adapter reads them from vrh_organism.json).
# The image comes first (LLaVA's usual order, and the paper's models'): the expression and answer tokens
# attend to visual tokens, so every query set of the paper (in, out, in+out) is meaningful. (Runs 4-5
# put the request first; with a pretrained tower that is no longer needed: docs/organism.md.)
GROUNDING_PROMPT = "USER: <image> where is {expression} ? ASSISTANT:"
VQA_PROMPT = "USER: <image> {question} ASSISTANT:"
CHAT_TEMPLATE = (
    "{% for m in messages %}{% if m['role'] == 'user' %}USER: "
    "{% for c in m['content'] %}{% if c['type'] == 'image' %}<image> {% endif %}{% endfor %}"
    "{% for c in m['content'] %}{% if c['type'] != 'image' %}{{ c['text'] }}{% endif %}{% endfor %}"
    " {% else %}ASSISTANT: "
    "{% for c in m['content'] %}{{ c['text'] }}{% endfor %} {% endif %}{% endfor %}"
    "{% if add_generation_prompt %}ASSISTANT:{% endif %}"
)


@dataclass(frozen=True)
class ImageSpec:
    image_size: int = world.IMAGE_SIZE
    patch_size: int = 16
    bin_px: int = 4

    @property
    def grid(self) -> int:
        return self.image_size // self.patch_size

    @property
    def num_image_tokens(self) -> int:
        return self.grid * self.grid  # CLS dropped ("default" feature strategy)


def vocabulary() -> list[str]:
    nums = [str(i) for i in range(MAX_NUMBER + 1)]
    return SPECIALS + PROMPT_WORDS + world.words() + nums


def build_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {w: i for i, w in enumerate(vocabulary())}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    # Whitespace splits "circle?" into "circle", "?" and "USER:" into "USER", ":"
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A $B", special_tokens=[("<s>", vocab["<s>"])])
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins word tokens with single spaces
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>",
        extra_special_tokens={"image_token": "<image>"}, padding_side="left",
        clean_up_tokenization_spaces=False)
    fast.add_special_tokens({"additional_special_tokens": ["<image>"]})
    return fast


def build_processor(spec: ImageSpec = ImageSpec()) -> LlavaProcessor:
    image_processor = CLIPImageProcessorPil(
        do_resize=True, size={"height": spec.image_size, "width": spec.image_size},
        do_center_crop=False, do_rescale=True, rescale_factor=1 / 255, do_normalize=True,
        image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5], do_convert_rgb=True)
    return LlavaProcessor(
        image_processor=image_processor, tokenizer=build_tokenizer(), patch_size=spec.patch_size,
        vision_feature_select_strategy="default", num_additional_image_tokens=1,
        chat_template=CHAT_TEMPLATE, image_token="<image>")


def snap(v: float, spec: ImageSpec) -> int:
    """A pixel coordinate snapped to the nearest bin, clipped to the image."""
    return int(min(spec.image_size, max(0, round(v / spec.bin_px) * spec.bin_px)))


def format_box(box, spec: ImageSpec = ImageSpec()) -> str:
    return "[ " + " , ".join(str(snap(v, spec)) for v in box) + " ]"
