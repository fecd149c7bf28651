"""Test texts: seeded English-like prose and hand-written Chinese news with near-duplicates."""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

_VOCABULARY = (
    "the of and to in a said for on that is was with by it at from as be its has he have "
    "will are were but which would an this had year pct mln billion dlrs company bank "
    "market prices oil trade government shares stock rate rates new last first week march "
    "april february sales profit net loss quarter exports imports tonnes wheat corn sugar "
    "coffee gold dollar yen mark interest central economic foreign minister official told "
    "reuters agreement offer price demand supply production growth budget deficit surplus "
    "japan states united west germany britain france canada china brazil debt loans"
).split()


def _pseudo_word(rng: random.Random) -> str:
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 11)))


# A long tail of rare words, as real text has: with only a small vocabulary every text
# would share most of its shingles, and all pairs would err the same way.
_RARE_WORDS = [_pseudo_word(random.Random(index)) for index in range(20_000)]


def english_like_text(rng: random.Random, length: int) -> str:
    """Newswire-like prose of about ``length`` characters: common words and a long tail."""
    words: list[str] = []
    size = 0
    while size < length:
        word = rng.choice(_VOCABULARY) if rng.random() < 0.5 else rng.choice(_RARE_WORDS)
        if rng.random() < 0.05:
            word = f"{rng.randint(1, 9999)}"
        words.append(word)
        size += len(word) + 1
    sentences = " ".join(words)
    return sentences[:length].strip() or "x"


def english_like_texts(seed: int, count: int, length: int) -> list[str]:
    """``count`` texts drawn as ``english_like_text`` draws one (half common words, half
    the long tail, one word in twenty a number), with numpy: some 15 us a 3 KB text
    against 350, for benchmarks of millions of documents."""
    generator = np.random.default_rng(seed)
    numbers = [str(number) for number in range(1, 10_000)]
    words = np.array(_VOCABULARY + _RARE_WORDS + numbers, dtype=object)
    rare_start, number_start = len(_VOCABULARY), len(_VOCABULARY) + len(_RARE_WORDS)
    per_text = length // 5 + 16  # words of 3 to 11 letters: never fewer than needed
    texts: list[str] = []
    for start in range(0, count, 4096):
        size = min(4096, count - start)
        shape = (size, per_text)
        common = generator.integers(0, rare_start, shape)
        rare = generator.integers(rare_start, number_start, shape)
        drawn = np.where(generator.random(shape) < 0.5, common, rare)
        number = generator.random(shape) < 0.05
        drawn[number] = generator.integers(number_start, len(words), int(number.sum()))
        for row in words[drawn]:
            texts.append(" ".join(row.tolist())[:length].strip())
    return texts


def mutate_words(rng: random.Random, text: str, fraction: float) -> str:
    """Replace about ``fraction`` of the words with random others (never all of them)."""
    words = text.split()
    for index in range(len(words)):
        if rng.random() < fraction:
            words[index] = rng.choice(_RARE_WORDS)
    return " ".join(words)


@dataclass(frozen=True)
class ChineseStory:
    original: str
    word_changed: str
    sentence_moved: str
    sentence_added: str


def _story(sentences: list[str], changed: tuple[str, str], added: str) -> ChineseStory:
    original = "".join(sentences)
    moved = "".join(sentences[1:] + sentences[:1])
    with_added = "".join([*sentences[:2], added, *sentences[2:]])
    return ChineseStory(original, original.replace(*changed, 1), moved, with_added)


CHINESE_NEWS = [
    _story(
        [
            "国家统计局今天发布数据显示，今年前三季度国内生产总值同比增长百分之五点二。",
            "其中第三季度增长百分之四点九，比第二季度有所放缓。",
            "统计局发言人表示，消费对经济增长的贡献率继续提高，服务业保持较快恢复。",
            "分析人士认为，第四季度宏观政策仍将保持稳健，以巩固经济回升向好的势头。",
        ],
        ("百分之四点九", "百分之五"),
        "工业增加值增速也超出市场预期。",
    ),
    _story(
        [
            "中国人民银行周五宣布，下调金融机构存款准备金率零点二五个百分点。",
            "此次降准预计释放长期资金约五千亿元，以保持银行体系流动性合理充裕。",
            "央行表示，稳健的货币政策要精准有力，更好地支持实体经济发展。",
            "市场人士指出，降准有助于降低银行资金成本，进而推动贷款利率下行。",
        ],
        ("周五", "周四"),
        "这是今年以来的第二次降准。",
    ),
    _story(
        [
            "受强冷空气影响，北方多地今日迎来大风降温天气，局地降温超过十度。",
            "中央气象台发布寒潮蓝色预警，提醒公众注意防寒保暖。",
            "交通部门表示，部分高速公路因路面结冰临时封闭，请司机朋友提前规划出行路线。",
            "气象专家预计，本轮降温过程将持续到周末，下周气温将逐步回升。",
        ],
        ("十度", "十二度"),
        "内蒙古东部和东北地区还将出现降雪。",
    ),
    _story(
        [
            "本届国际汽车博览会今天在上海开幕，共有一千多家企业参展。",
            "新能源汽车成为展会最大亮点，多家厂商发布了新款电动车型。",
            "组委会介绍，展会期间预计将接待观众超过八十万人次。",
            "业内人士表示，智能驾驶和电池技术的进步正在改变整个汽车产业的格局。",
        ],
        ("上海", "北京"),
        "首发车型数量创下历史新高。",
    ),
    _story(
        [
            "我国首艘自主建造的大型邮轮今天完成首次试航，顺利返回码头。",
            "这艘邮轮总吨位超过十三万吨，可搭载乘客五千多人。",
            "船厂负责人说，邮轮建造涉及的配套设备数量庞大，建造难度极高。",
            "邮轮预计明年正式投入运营，主要开展东北亚航线业务。",
        ],
        ("五千多人", "六千多人"),
        "试航期间各项性能指标均达到设计要求。",
    ),
]
